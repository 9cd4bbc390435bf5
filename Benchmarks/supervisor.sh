#!/usr/bin/env bash
# Cost of a metadata call the sandbox confines (chmod, chown, utimensat,
# xattr reads: the calls Landlock does not mediate) against the same call
# made natively, in one run: per-call figures from a small C loop, then
# `tar xf` and `ls -l` of many files. Each confined figure twice: under the
# keeper's read-only mounts (the default: changes are native inside the
# writable folders, EROFS outside; attribute reads stay with the supervisor)
# and with --supervise-metadata (the supervisor decides every call).
# Prints figures and ratios; asserts nothing (timing belongs here, not in tests).
# BEFORE=/path/to/an/older/sandboxed-run adds its figures, for a before/after
# in the same run. The `floor` rows are the least any supervisor costs: a
# chmod answered at once by a thread of the same process, blocking in RECV or
# polling first (as the launcher does), with and without synchronous wake-ups
# (see supervised-calls.c).
#   [BEFORE=old/sandboxed-run] [SKIP_BUILD=1] Benchmarks/supervisor.sh [CALLS] [FILES] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
calls="${1:-20000}"
files="${2:-10000}"
runs="${3:-10}"
[ -n "${SKIP_BUILD:-}" ] || scripts/install-deps
[ -n "${SKIP_BUILD:-}" ] || scripts/build-release >/dev/null
bin="$PWD/.build/release/sandboxed-run"
export XDG_DATA_HOME
XDG_DATA_HOME="$(mktemp -d)"
tools="$(mktemp -d)"
native="$(mktemp -d)"
trap 'rm -rf "$XDG_DATA_HOME" "$tools" "$native"' EXIT
container="$("$bin" container path --app bench)"
confined="$container/Documents/bench"
mkdir -p "$confined"
# The workload runs from a folder the policy lets it execute, nothing more.
cc -O2 -pthread -o "$tools/supervised-calls" Benchmarks/supervised-calls.c
chmod 0755 "$tools" "$tools/supervised-calls"
sed "s|<string>/etc/alternatives</string>|&<string>$tools</string>|" Policies/writer.plist > "$tools/bench.plist"
sandboxed=("$bin" run --app bench --policy "$tools/bench.plist" --)
supervised=("$bin" run --supervise-metadata --app bench --policy "$tools/bench.plist" --)
before=("${BEFORE:-$bin}" run --app bench --policy "$tools/bench.plist" --)

# An archive of FILES small files in 100 folders, as a source tree.
mkdir "$tools/tree"
python3 - "$tools/tree" "$files" <<'PY'
import os, sys
root, count = sys.argv[1], int(sys.argv[2])
for i in range(count):
    folder = os.path.join(root, f"d{i % 100:02d}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"f{i:05d}"), "w") as f:
        f.write("x")
PY
tar -C "$tools" -cf "$tools/tree.tar" tree
rm -rf "$tools/tree"
chmod 0644 "$tools/tree.tar"

# Read-only mounts need stdio that is no file of the host's: a pipe, /dev/null.
mode="$("${sandboxed[@]}" /bin/sh -c 'grep -c " / / ro," /proc/self/mountinfo' </dev/null 2>&1 || true)"
[ "$mode" = 1 ] || { echo "read-only mounts were not used (got '$mode')" >&2; exit 1; }
echo "per call, ${calls} calls on one file (ns; ratios to native):"
printf '%-18s %10s %12s %8s %12s %8s' call native mounts ratio supervised ratio
[ -n "${BEFORE:-}" ] && printf ' %12s %8s' before ratio
echo
touch "$native/file"
direct="$("$tools/supervised-calls" chmod "$native/file" "$calls")"
for floor in floor floor-no-sync floor-poll floor-poll-no-sync; do
    cost="$("$tools/supervised-calls" "$floor" "$native/file" "$calls")"
    awk -v o="$floor" -v n="$direct" -v s="$cost" 'BEGIN { printf "%-18s %10.0f %12.0f %8.1f\n", o, n, s, s / n }'
done
for operation in chmod fchmodat fchmod utimensat chown lchown getxattr lgetxattr-absent listxattr; do
    touch "$native/file" "$confined/file"
    direct="$("$tools/supervised-calls" "$operation" "$native/file" "$calls")"
    mounts="$("${sandboxed[@]}" "$tools/supervised-calls" "$operation" Documents/bench/file "$calls" </dev/null 2>&1)"
    checked="$("${supervised[@]}" "$tools/supervised-calls" "$operation" Documents/bench/file "$calls" </dev/null 2>&1)"
    old=0
    [ -n "${BEFORE:-}" ] && old="$("${before[@]}" "$tools/supervised-calls" "$operation" Documents/bench/file "$calls" </dev/null 2>&1)"
    awk -v o="$operation" -v n="$direct" -v m="$mounts" -v s="$checked" -v b="$old" \
        'BEGIN { printf "%-18s %10.0f %12.0f %8.1f %12.0f %8.1f", o, n, m, m / n, s, s / n; if (b > 0) printf " %12.0f %8.1f", b, b / n; printf "\n" }'
done

echo
echo "tar xf and ls -l of ${files} files (tar as root also chowns; each file costs chown, chmod and utimensat):"
results="$tools/results.json"
older=()
[ -n "${BEFORE:-}" ] && older=(
    -n "tar xf, before" --prepare "rm -rf $confined/tree" "${before[*]} tar -C Documents/bench -xf $tools/tree.tar"
    -n "ls -lR, before" --prepare true "${before[*]} ls -lR Documents/bench/tree")
hyperfine -N --warmup 1 --runs "$runs" --export-json "$results" \
    -n "tar xf, native" --prepare "rm -rf $native/tree" "tar -C $native -xf $tools/tree.tar" \
    -n "tar xf, mounts" --prepare "rm -rf $confined/tree" "${sandboxed[*]} tar -C Documents/bench -xf $tools/tree.tar" \
    -n "tar xf, supervised" --prepare "rm -rf $confined/tree" "${supervised[*]} tar -C Documents/bench -xf $tools/tree.tar" \
    -n "ls -lR, native" --prepare true "ls -lR $native/tree" \
    -n "ls -lR, mounts" --prepare true "${sandboxed[*]} ls -lR Documents/bench/tree" \
    -n "ls -lR, supervised" --prepare true "${supervised[*]} ls -lR Documents/bench/tree" \
    -n "sandboxed-run run (launch only)" --prepare true "${sandboxed[*]} /bin/true" \
    "${older[@]}" >&2
python3 - "$results" "$files" <<'PY'
import json, sys
r = {x["command"]: x["median"] for x in json.load(open(sys.argv[1]))["results"]}
files = int(sys.argv[2])
launch = r["sandboxed-run run (launch only)"]
print(f"{'command':22} {'native ms':>10} {'confined ms':>14} {'ratio':>6} {'µs per file, launch excluded':>30}")
for name in ("tar xf", "ls -lR"):
    n = r[f"{name}, native"]
    print(f"{name + ', native':22} {n * 1e3:10.1f}")
    for how in ("mounts", "supervised"):
        s = r[f"{name}, {how}"]
        print(f"{name + ', ' + how:22} {'':10} {s * 1e3:14.1f} {s / n:6.2f} {(s - launch - n) / files * 1e6:30.2f}")
    if f"{name}, before" in r:
        b = r[f"{name}, before"]
        print(f"{name + ', before':22} {'':10} {b * 1e3:14.1f} {b / n:6.2f} {(b - launch - n) / files * 1e6:30.2f}")
print(f"(launch alone: {launch * 1e3:.1f} ms)")
PY
