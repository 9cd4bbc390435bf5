#!/usr/bin/env bash
# Real programs on a granted tree of a few thousand files: `ls -lR`, `git
# status`, `find | sha256sum` (through sh -c) and a Python import of a few
# stdlib modules, each unconfined, under `sandboxed-run run` with the tree's
# folder granted, and under bubblewrap with the folder bound, all in one
# interleaved run (Benchmarks/interleaved.c: one run of each per round, in a
# shuffled order). `run -- /bin/true` and bubblewrap's /bin/true run in the
# same turns: their cost over /bin/true (the launch) is subtracted from each
# confined figure, so the ratios are the programs' own. Prints medians and
# ratios; asserts nothing.
#   Benchmarks/real-programs.sh [ROUNDS]         (default 30)
#   VIEW=host|private   adds `--view $VIEW` to every `run` (the launcher must know --view)
#   POLICY=NAME|FILE    `--policy` for every `run` (default: the launcher's, writer)
#   FILES=N             how many files the tree holds at least (default 3000)
#   BIN=PATH            measure this launcher instead of building scripts/build-release's
#   SCRATCH=DIR         where the tree goes (default: a new folder in /var/tmp; not
#                       under /tmp, which bubblewrap's --tmpfs /tmp would hide)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-30}"
files="${FILES:-3000}"
scripts/install-deps
root="$(mktemp -d -p "${SCRATCH:-/var/tmp}" sandboxed-run-bench.XXXXXX)"
trap 'rm -rf "$root"' EXIT
# A fresh copy, as Benchmarks/launch.sh measures: a binary's pages in the page cache move a launch.
if [ -n "${BIN:-}" ]; then
    cp "$BIN" "$root/sandboxed-run"
else
    cp "$(scripts/build-release)" "$root/sandboxed-run"
fi
bin="$root/sandboxed-run"
if [ -n "${VIEW:-}" ] && ! "$bin" run --help 2>&1 | grep -q -- '--view'; then
    echo "VIEW=$VIEW: this launcher has no --view option; leave VIEW unset for today's host view" >&2
    exit 2
fi
export XDG_DATA_HOME="$root/data" XDG_STATE_HOME="$root/state"

# The tree: this repository's checkout (git archive of HEAD), copied until it
# holds $files files, committed into a fresh repository with fixed dates and
# names, so the same commit gives the same tree.
vault="$root/vault"
tree="$vault/tree"
mkdir -p "$tree"
copies=0
while [ "$(find "$tree" -type f | wc -l)" -lt "$files" ]; do
    copies=$((copies + 1))
    mkdir "$tree/copy-$copies"
    git archive HEAD | tar -x -C "$tree/copy-$copies"
done
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.com GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.com
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
git -C "$tree" init -q
git -C "$tree" add -A
git -C "$tree" -c commit.gpgsign=false commit -qm tree
git -C "$tree" status --porcelain >/dev/null  # the index refreshed once, outside the measurement
count="$(git -C "$tree" ls-files | wc -l)"
bytes="$(du -sb --exclude=.git "$tree" | cut -f1)"
echo "tree: $count files in $copies copies of this repository's HEAD ($((bytes / 1024)) KiB, .git aside), at $tree" >&2

"$bin" pick --app bench --select "$vault" -o "$root/vault.bookmark" >/dev/null
run=("$bin" run --app bench)
if [ -n "${POLICY:-}" ]; then run+=(--policy "$POLICY"); fi
if [ -n "${VIEW:-}" ]; then run+=(--view "$VIEW"); fi
run+=(--grant "VAULT=$root/vault.bookmark" --)
bwrap=("$(command -v bwrap)" --ro-bind / / --bind "$vault" "$vault" --unshare-all --new-session --die-with-parent
       --dev /dev --proc /proc --tmpfs /tmp)
# The container exists before the measurement, and every program runs once in each place.
"${run[@]}" /bin/true

# python3 of the system (the sandbox's PATH has no pyenv or venv), writing no bytecode anywhere.
imports="import json, decimal, email.parser, http.client, sqlite3, argparse, xml.etree.ElementTree, asyncio"
programs=(
    "/bin/ls -lR $tree"
    "/usr/bin/git -C $tree status"
    "/bin/sh -c 'cd $tree && find . | sha256sum'"
    "/usr/bin/python3 -B -c '$imports'"
)
names=("ls -lR" "git status" "find | sha256sum" "python3 imports")
commands=("/bin/true" "${run[*]} /bin/true" "${bwrap[*]} /bin/true")
for program in "${programs[@]}"; do
    commands+=("$program" "${run[*]} $program" "${bwrap[*]} $program")
done
# Every command once, checked, before the turns (interleaved stops at the first failure without saying why).
for command in "${commands[@]}"; do
    eval "$command" >/dev/null 2>"$root/check.err" || { echo "fails: $command" >&2; cat "$root/check.err" >&2; exit 1; }
done

cc -O2 -o "$root/interleaved" Benchmarks/interleaved.c
"$root/interleaved" "$rounds" 3 "${commands[@]}" > "$root/interleaved.txt"
python3 - "$root/interleaved.txt" "$rounds" "${VIEW:-host (no --view)}" "${names[@]}" <<'PY'
import sys
path, rounds, view, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = [[float(x) for x in line.split()[:3]] for line in open(path)]
true, run_true, bwrap_true = (row[0] for row in rows[:3])
launch = {"run": run_true - true, "bwrap": bwrap_true - true}
print(f"in turns, {rounds} rounds; sandboxed-run view: {view}")
print(f"launch (median over /bin/true, subtracted below): sandboxed-run run {launch['run']:.2f} ms, bubblewrap {launch['bwrap']:.2f} ms")
print(f"{'program':20} {'unconfined':>11} {'run':>9} {'bwrap':>9} {'run/unconf':>11} {'bwrap/unconf':>13} {'run/bwrap':>10}")
for index, name in enumerate(names):
    bare, ours, theirs = (rows[3 + 3 * index + k][0] for k in range(3))
    ours -= launch["run"]
    theirs -= launch["bwrap"]
    print(f"{name:20} {bare:9.2f}ms {ours:7.2f}ms {theirs:7.2f}ms {ours / bare:10.2f}x {theirs / bare:12.2f}x {ours / theirs:9.2f}x")
print("(medians, ms; the confined columns have their launch subtracted; p25-p75 of each command:)")
labels = ["/bin/true", "run /bin/true", "bwrap /bin/true"] + [f"{n} {w}" for n in names for w in ("unconfined", "run", "bwrap")]
for label, row in zip(labels, rows):
    print(f"  {label:32} {row[0]:8.2f} ({row[1]:.2f}-{row[2]:.2f})")
PY
