#!/usr/bin/env bash
# Resolve time (fresh, moved) and launch time with a grant, with 10 and with
# 1,000,000 grants in the ledger, from the launch cache and reading the
# ledger (a grant's first launch after the ledger changed); bubblewrap
# measured in the same run.
# Prints figures; asserts nothing. Filling a million grants takes about 30 s.
#   Benchmarks/grants.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-200}"
scripts/install-deps
scripts/build-release >/dev/null
swift build -c release --static-swift-stdlib --product grants-benchmark >&2
bin="$PWD/.build/release/sandboxed-run"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
export XDG_DATA_HOME="$root/data"

commands=()
for count in 10 1000000; do
    echo "== $count grants in the ledger"
    .build/release/grants-benchmark "$root/state-$count/sandboxed-run" "$root/work-$count" "$count"
    commands+=(-n "run --grant, $count grants" "env XDG_STATE_HOME=$root/state-$count $bin run --app com.example.memo --grant VAULT=$root/work-$count/vault.bookmark -- /bin/true")
done
# The first launch after a change reads the ledger: the cache is removed
# before each of its runs (hyperfine takes one --prepare per command, in order).
first=(-n "run --grant, 10 grants, ledger read"
       "env XDG_STATE_HOME=$root/state-10 $bin run --app com.example.memo --grant VAULT=$root/work-10/vault.bookmark -- /bin/true")
prepare=()
for _ in 1 2 3; do prepare+=(--prepare true); done
prepare+=(--prepare "rm -f $root/state-10/sandboxed-run/ledger.cache" --prepare true)
"$bin" run --app com.example.memo -- /bin/true
echo "== launch (hyperfine medians)"
hyperfine -N --warmup 20 --runs "$runs" --export-json "$root/launch.json" "${prepare[@]}" \
    -n "run, no grant" "$bin run --app com.example.memo -- /bin/true" \
    "${commands[@]}" "${first[@]}" \
    -n "bwrap isolated, one bind" "bwrap --ro-bind / / --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp --bind $root/work-10/vault /tmp/vault /bin/true" >&2
python3 - "$root/launch.json" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
base = next(r["median"] for r in results if r["command"] == "run, no grant")
for r in results:
    print(f"  {r['command']:32} {r['median'] * 1e3:7.2f} ms   x{r['median'] / base:.2f} of run without grants")
PY
