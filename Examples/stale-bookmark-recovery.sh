#!/usr/bin/env bash
# Stale-bookmark recovery, as a CI job would exercise it: the user renames
# the folder an app was granted; the next launch must notice, say so, and
# recover only when told to; a replaced folder must never be followed.
#   Examples/stale-bookmark-recovery.sh [path/to/sandboxed-run]
set -euo pipefail
bin="${1:-$(dirname "$0")/../.build/release/sandboxed-run}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export XDG_DATA_HOME="$work/data" XDG_STATE_HOME="$work/state"
app=com.example.memo
step() { printf '\n\033[1m-- %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; set +e; "$@"; printf '(exit %d)\n' "$?"; set -e; }

mkdir -p "$work/Notes"
step "The user picks a folder once; the app keeps the opaque bookmark"
show "$bin" pick --app "$app" --select "$work/Notes" -o "$work/vault.bookmark"
show "$bin" run --app "$app" --grant "VAULT=$work/vault.bookmark" -- /bin/sh -c 'echo "- first" >> "$SANDBOX_GRANT_VAULT/today.md"; echo wrote to $SANDBOX_GRANT_VAULT'

step "The user renames the folder: the bookmark is now stale"
mv "$work/Notes" "$work/Notes (2026)"
show "$bin" resolve --app "$app" --json "$work/vault.bookmark"
show "$bin" run --app "$app" --grant "VAULT=$work/vault.bookmark" -- /bin/true

step "Recover as Apple advises: accept the moved folder and save the new bookmark"
show "$bin" run --app "$app" --grant "VAULT=$work/vault.bookmark" --on-stale follow -- /bin/sh -c 'cat "$SANDBOX_GRANT_VAULT/today.md"'
show "$bin" resolve --app "$app" "$work/vault.bookmark"

step "Someone deletes the folder and makes a new one with the same name: never followed"
rm -rf "$work/Notes (2026)" && mkdir "$work/Notes (2026)"
show "$bin" run --app "$app" --grant "VAULT=$work/vault.bookmark" --on-stale follow -- /bin/true
