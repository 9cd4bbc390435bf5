#!/usr/bin/env bash
# Real programs on a granted tree of a few thousand files: `ls -lR`, `git
# status`, `find | sha256sum` (a sh script) and a Python import of a few
# stdlib modules, each unconfined, under `sandboxed-run run` with the tree's
# folder granted, under bubblewrap with the folder bound (its "isolated"
# line), and under bubblewrap building the same view as ours (the policy's
# system paths, the container and the folder: Benchmarks/bwrap-view.py), all
# in one interleaved run (Benchmarks/interleaved.c: one run of each per
# round, in a shuffled order). `run -- /bin/true` and each bubblewrap's
# /bin/true run in the same turns: their cost over /bin/true (the launch) is
# subtracted from each confined figure, so the ratios are the programs' own.
# Prints medians, ratios and the targets (ls -lR <= 1.3x unconfined, git
# status <= 1.2x); asserts nothing.
#   Benchmarks/real-programs.sh [ROUNDS]         (default 30)
#   VIEW=host|private   adds `--view $VIEW` to every `run` (unset: the launcher's default, private)
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
view_label="${VIEW:-private (the default)}"
"$bin" run --help 2>&1 | grep -q -- '--view' || view_label="host (a launcher without --view)"
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
container="$("${run[@]}" /usr/bin/printenv SANDBOX_CONTAINER)"
policy_file="Policies/${POLICY:-writer}.plist"
[ -f "${POLICY:-}" ] && policy_file="$POLICY"
mapfile -t same_view < <(python3 Benchmarks/bwrap-view.py "$policy_file" --bind "$container" --bind "$vault")
same_view[0]="$(command -v bwrap)"

# python3 of the system (the sandbox's PATH has no pyenv or venv), writing no
# bytecode anywhere. The pipeline and the imports are scripts in the granted
# folder (beside the tree): interleaved splits a command at every space.
echo "cd '$tree' && find . | sha256sum" > "$vault/find-sha256sum.sh"
echo "import json, decimal, email.parser, http.client, sqlite3, argparse, xml.etree.ElementTree, asyncio" > "$vault/imports.py"
programs=(
    "/bin/ls -lR $tree"
    "/usr/bin/git -C $tree status"
    "/bin/sh $vault/find-sha256sum.sh"
    "/usr/bin/python3 -B $vault/imports.py"
)
names=("ls -lR" "git status" "find | sha256sum" "python3 imports")
commands=("/bin/true" "${run[*]} /bin/true" "${bwrap[*]} /bin/true" "${same_view[*]} /bin/true")
for program in "${programs[@]}"; do
    commands+=("$program" "${run[*]} $program" "${bwrap[*]} $program" "${same_view[*]} $program")
done
# Every command once, checked, before the turns (interleaved stops at the first failure without saying why).
for command in "${commands[@]}"; do
    eval "$command" >/dev/null 2>"$root/check.err" || { echo "fails: $command" >&2; cat "$root/check.err" >&2; exit 1; }
done

cc -O2 -o "$root/interleaved" Benchmarks/interleaved.c
"$root/interleaved" "$rounds" 3 "${commands[@]}" > "$root/interleaved.txt"
python3 - "$root/interleaved.txt" "$rounds" "$view_label" "${names[@]}" <<'PY'
import sys
path, rounds, view, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = [[float(x) for x in line.split()[:3]] for line in open(path)]
true, run_true, bwrap_true, same_true = (row[0] for row in rows[:4])
launch = {"run": run_true - true, "bwrap": bwrap_true - true, "same": same_true - true}
print(f"in turns, {rounds} rounds; sandboxed-run view: {view}")
print(f"launch (median over /bin/true, subtracted below): sandboxed-run run {launch['run']:.2f} ms, "
      f"bubblewrap isolated {launch['bwrap']:.2f} ms, bubblewrap same view {launch['same']:.2f} ms")
print(f"{'program':18} {'unconfined':>11} {'run':>9} {'bwrap':>9} {'bwrap view':>11} {'run/unconf':>11} {'bwrap/unconf':>13} {'view/unconf':>12} {'run/bwrap':>10}")
targets = {"ls -lR": 1.3, "git status": 1.2}
verdicts = []
for index, name in enumerate(names):
    bare, ours, theirs, same = (rows[4 + 4 * index + k][0] for k in range(4))
    ours -= launch["run"]
    theirs -= launch["bwrap"]
    same -= launch["same"]
    print(f"{name:18} {bare:9.2f}ms {ours:7.2f}ms {theirs:7.2f}ms {same:9.2f}ms {ours / bare:10.2f}x {theirs / bare:12.2f}x {same / bare:11.2f}x {ours / theirs:9.2f}x")
    if name in targets:
        verdicts.append(f"  {name}: run x{ours / bare:.2f} of unconfined, target <= {targets[name]}: {'met' if ours / bare <= targets[name] else 'MISSED'}")
print("targets (launch subtracted):")
print("\n".join(verdicts))
print("(medians, ms; the confined columns have their launch subtracted; p25-p75 of each command:)")
labels = ["/bin/true", "run /bin/true", "bwrap /bin/true", "bwrap view /bin/true"] + [f"{n} {w}" for n in names for w in ("unconfined", "run", "bwrap", "bwrap view")]
for label, row in zip(labels, rows):
    print(f"  {label:32} {row[0]:8.2f} ({row[1]:.2f}-{row[2]:.2f})")
PY
