#!/usr/bin/env bash
# The motivating story as an experiment: naive appends against a sync daemon's
# remote edits lose and corrupt lines; coordinated appends lose none. Prints
# the counts, and coordinated throughput as a ratio of naive (same run, same
# language, same process model), with and without the flushes that make
# success durable. Also the CLI: `sandboxed-run append` per line against
# `sh -c 'printf >> file'` per line (a process each). Then the stress test at
# full length (STRESS_SECONDS per seed, default 60; 0 skips it): writers and
# the simulator killed at random, every acknowledged record counted.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-20000}"
[ "${SKIP_BUILD:-}" = 1 ] || scripts/build-release >/dev/null
bin="$PWD/.build/release/sandboxed-run"
python3 Benchmarks/coordination.py "$bin" "$rounds" "${EDIT_RATE:-200}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$(date +%s%N); for i in $(seq 1 300); do /bin/sh -c 'printf "line %d\n" "$1" >> "$2"' sh "$i" "$work/shell.md"; done; shell=$(( ($(date +%s%N) - start) / 300 ))
start=$(date +%s%N); for i in $(seq 1 300); do "$bin" append "$work/cli.md" "line $i"; done; cli=$(( ($(date +%s%N) - start) / 300 ))
python3 -c 'import sys; s, c = int(sys.argv[1]), int(sys.argv[2]); print("per line, a process each: sh -c \"printf >> file\" %d us, sandboxed-run append %d us (%.2fx)" % (s // 1000, c // 1000, c / s))' "$shell" "$cli"
if [ "${STRESS_SECONDS:-60}" != 0 ]; then
    python3 Benchmarks/coordination-stress.py "$bin" --seconds "${STRESS_SECONDS:-60}" --seeds "${STRESS_SEEDS:-1,2,3}"
fi
