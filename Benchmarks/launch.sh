#!/usr/bin/env bash
# Launch cost of `sandboxed-run run -- /bin/true` against /bin/true and
# bubblewrap, measured in the same run with hyperfine, plus peak memory.
# Prints figures and ratios; asserts nothing (timing belongs here, not in tests).
#   Benchmarks/launch.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-300}"
scripts/install-deps
swift build -c release --static-swift-stdlib --product sandboxed-run >&2
bin="$PWD/.build/release/sandboxed-run"
export XDG_DATA_HOME
XDG_DATA_HOME="$(mktemp -d)"
results="$(mktemp)"
trap 'rm -rf "$XDG_DATA_HOME" "$results"' EXIT
"$bin" run --app bench -- /bin/true  # create the container outside the measurement

hyperfine -N --warmup 30 --runs "$runs" --export-json "$results" \
    -n "true" "/bin/true" \
    -n "sandboxed-run --help (start-up only)" "$bin --help" \
    -n "sandboxed-run run" "$bin run --app bench -- /bin/true" \
    -n "bwrap --ro-bind / /" "bwrap --ro-bind / / /bin/true" \
    -n "bwrap isolated" "bwrap --ro-bind / / --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
    >&2

python3 - "$results" "$bin" <<'PY'
import json, resource, subprocess, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
bin = sys.argv[2]
ours = results["sandboxed-run run"]["median"]
print(f"{'command':40} {'median ms':>10} {'mean ms':>9} {'ours / it':>10}")
for name, r in results.items():
    print(f"{name:40} {r['median'] * 1e3:10.2f} {r['mean'] * 1e3:9.2f} {ours / r['median']:10.2f}")
startup = results["sandboxed-run --help (start-up only)"]["median"]
print(f"\nof our median {ours * 1e3:.2f} ms, {startup * 1e3:.2f} ms is process start-up and argument parsing "
      f"(Swift runtime, relocations), the rest policy, Landlock ruleset, seccomp compile, fork and exec")

def peak_rss(command):
    # GNU time is a small C parent; a forked child's pre-exec copy counts in ru_maxrss,
    # so a large parent (python) would hide the figure. /bin/true shows the floor.
    run = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True, check=True)
    return int(run.stderr.strip().splitlines()[-1])
print("\npeak resident memory, the largest process of each (KiB):")
for name, command in [("true", ["/bin/true"]),
                      ("bwrap isolated", ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--new-session", "--die-with-parent", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "/bin/true"]),
                      ("sandboxed-run run", [bin, "run", "--app", "bench", "--", "/bin/true"])]:
    print(f"  {name:38} {peak_rss(command):8d}")
PY
