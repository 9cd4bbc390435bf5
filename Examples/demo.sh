#!/usr/bin/env bash
# The main job: builds sandboxed-run and shows the model on the embedded
# default policy (writer), in a throwaway data folder.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps
scripts/build-release >/dev/null
bin=".build/release/sandboxed-run"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export XDG_DATA_HOME="$work/data" XDG_STATE_HOME="$work/state"
mkdir -p "$work/Vault"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# Each command is echoed as it is run, quoted so that it can be pasted back.
# demo-echo-begin (Tests/CLITests/ExamplesTests.swift runs these)
run() { printf '$'; printf ' %q' "$@"; printf '\n'; "$@" || printf '(exit %d)\n' "$?"; }
# run_from FILE COMMAND...: COMMAND with FILE as its standard input.
run_from() {
    local input="$1"; shift
    printf '$'; printf ' %q' "$@"; printf ' < %q\n' "$input"
    "$@" < "$input" || printf '(exit %d)\n' "$?"
}
# demo-echo-end

say "What this kernel enforces for the default policy"
"$bin" doctor --policy writer | sed -n '1,3p;/policy/,$p'

say "A memo writer appends to today's note in its own container"
run_from Examples/memo-writer.py "$bin" run --app com.example.memo -- /usr/bin/python3 - "Call the plumber"
run_from Examples/memo-writer.py "$bin" run --app com.example.memo -- /usr/bin/python3 - "Water the plants"
run "$bin" run --app com.example.memo -- /bin/sh -c 'cat Documents/daily/*.md'

say "The same tool, turned hostile, reaches nothing else"
attack='
for f in /etc/shadow "$REAL_HOME/.bash_history"; do cat "$f" >/dev/null 2>&1 && echo "read $f: YES" || echo "read $f: refused"; done
stat "$REAL_HOME" >/dev/null 2>&1 && echo "stat $REAL_HOME: YES" || echo "stat $REAL_HOME: not there (a private view)"
{ echo owned > /tmp/owned; } 2>/dev/null && echo "write /tmp: yes, its own /tmp, gone with it" || echo "write /tmp: refused"
chmod 777 /usr/bin/true 2>/dev/null && echo "chmod /usr/bin/true: YES" || echo "chmod /usr/bin/true: refused"
touch /etc/passwd 2>/dev/null && echo "touch /etc/passwd: YES" || echo "touch /etc/passwd: refused"
kill -0 1 2>/dev/null && echo "signal pid 1: YES" || echo "signal pid 1: refused"
/usr/bin/python3 -c "import socket; socket.socket().connect((\"127.0.0.1\", 22))" 2>/dev/null && echo "network: YES" || echo "network: refused"'
run "$bin" run --app com.example.memo --setenv "REAL_HOME=$HOME" -- /bin/sh -c "$attack"
[ -e /tmp/owned ] && echo "the host's /tmp/owned: YES" || echo "the host's /tmp/owned: not there"

say "Why hardcoded paths fail: the container moves on reinstall, as on iOS"
run_from Examples/hardcoded-path.py "$bin" run --app com.example.paths -- /usr/bin/python3 -
run "$bin" container reinstall --app com.example.paths
run_from Examples/hardcoded-path.py "$bin" run --app com.example.paths -- /usr/bin/python3 -

say "The only way into your folder: you pick it, the app gets an opaque bookmark"
run "$bin" pick --app com.example.memo --select "$work/Vault" -o "$work/vault.bookmark"
run_from Examples/memo-writer.py "$bin" run --app com.example.memo --grant "VAULT=$work/vault.bookmark" -- /usr/bin/python3 - "Granted vault works"
run cat "$work/Vault/daily/"*.md
run "$bin" run --app com.example.thief --grant "VAULT=$work/vault.bookmark" -- /bin/true
run "$bin" grants list

say "Live grants: the running app asks for a folder, you answer outside it, revoke takes it back"
mkdir -p "$work/Photos" && echo "beach.jpg" > "$work/Photos/index"
printf '#!/bin/sh\nprintf "%%s\\n" "%s"\n' "$work/Photos" > "$work/picker" && chmod +x "$work/picker"
live='
cat "$PHOTOS/index" 2>/dev/null || echo "before asking: no such folder here"
p=$("$SANDBOXED_RUN" open-panel --read-only --prompt "Your photos?" -o "$SANDBOX_CONTAINER/photos.bookmark") || exit
echo "granted at $p: $(cat "$p/index")"'
run "$bin" run --app com.example.viewer --picker "$work/picker" --setenv "PHOTOS=$work/Photos" -- /bin/sh -c "$live"
later='
p=$("$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/photos.bookmark") && echo "a later run, no --grant: $(cat "$p/index")"
: > "$SANDBOX_CONTAINER/started"; sleep 1
cat "$p/index" 2>/dev/null || echo "after grants revoke: gone from the running app"'
"$bin" run --app com.example.viewer -- /bin/sh -c "$later" &
until [ -e "$work"/data/sandboxed-run/containers/com.example.viewer/*/started ]; do sleep 0.05; done
run "$bin" grants revoke --app com.example.viewer
wait

say "Stale bookmarks: moved folders are noticed, replaced ones are never followed"
Examples/stale-bookmark-recovery.sh "$bin"

say "A vault a sync daemon rewrites: naive appends lose lines, coordinated appends lose none"
# sync-simulator acts as the daemon (remote edits rewrite the whole note and
# rename it over); the counts are what the motivating story lost.
run python3 Benchmarks/coordination.py "$bin" 1000

say "The note is evicted to a placeholder: the line waits in the app's container"
vault_note() { ls "$work/Vault/daily/" | grep -v '^\.' | head -1; }
run "$bin" sync-simulator "$work/Vault" --seconds 0.5 --edit-rate 0 --evict-rate 1000 --leave-placeholders
run ls -A "$work/Vault/daily"
run_from Examples/memo-writer.py "$bin" run --app com.example.memo --grant "VAULT=$work/vault.bookmark" -- /usr/bin/python3 - "Book the dentist"
say "The daemon downloads it (the memo writer asked); at the next launch the line lands"
run "$bin" sync-simulator "$work/Vault" --seconds 0.5 --edit-rate 0
run_from Examples/memo-writer.py "$bin" run --app com.example.memo --grant "VAULT=$work/vault.bookmark" -- /usr/bin/python3 - "Buy stamps"
run cat "$work/Vault/daily/$(vault_note)"

say "A writer turned hostile inside your vault: with --review its changes wait for you to look"
mkdir -p "$work/Vault/projects" && echo "Build the garden shed in May" > "$work/Vault/projects/shed.md"
# Every name, type, mode, size and mtime in the vault, and every file's SHA-256.
vault_state() { (cd "$work/Vault" && find . -printf '%y %m %s %T@ %p\n' | LC_ALL=C sort && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum); }
vault_state > "$work/vault-before.txt"
run sha256sum "$work/Vault/daily/$(vault_note)" "$work/Vault/projects/shed.md"
hostile='
v="$SANDBOX_GRANT_VAULT"
for note in "$v"/daily/*.md; do : > "$note" && echo "truncated $note"; done
rm -r "$v/projects" && echo "deleted $v/projects"
echo "Your notes are encrypted. Pay 1 BTC." > "$v/READ-ME-NOW.txt" && echo "planted $v/READ-ME-NOW.txt"
head -c 4096 /dev/urandom > "$v/daily/.cache" && echo "planted $v/daily/.cache"'
# setsid: no terminal to ask on when the command ends, so the changes stay
# staged for `review` (on a terminal, run --review asks: accept, reject, diff, keep).
run setsid -w "$bin" run --app com.example.memo --review --grant "VAULT=$work/vault.bookmark" -- /bin/sh -c "$hostile"
run "$bin" review list --app com.example.memo
run ls -A "$work/Vault"
run "$bin" review reject --app com.example.memo
run sha256sum "$work/Vault/daily/$(vault_note)" "$work/Vault/projects/shed.md"
vault_state > "$work/vault-after.txt"
if cmp -s "$work/vault-before.txt" "$work/vault-after.txt"; then
    echo "the vault is byte-identical to before the run: every file, folder, mode and mtime"
else
    echo "the vault CHANGED:"; diff "$work/vault-before.txt" "$work/vault-after.txt" || true
fi
