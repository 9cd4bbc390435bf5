#!/usr/bin/env bash
# Launch cost of `sandboxed-run run -- /bin/true` (and with one grant)
# against /bin/true and bubblewrap, measured in the same hyperfine run and
# again in turns (one launch of each per round, the steadier ratios), with
# peak memory, then where our launch time goes (perf, where the machine has
# it). Prints figures and ratios; asserts nothing (timing belongs here).
#   Benchmarks/launch.sh [RUNS]
#   BEFORE=/path/to/older/sandboxed-run Benchmarks/launch.sh [RUNS]
#     also runs an older build's `run` and `run --grant` in the same turns,
#     and prints this build's time over it (a change's cost, measured alike).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-300}"
scripts/install-deps
scripts/build-release >/dev/null
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
# Each binary measured is a fresh copy: how a file's pages came into the page
# cache (a linker's writes, a cp) moves its launch by 10% here, so the builds
# compared must get there alike.
cp "$PWD/.build/release/sandboxed-run" "$root/sandboxed-run"
bin="$root/sandboxed-run"
if [ -n "${BEFORE:-}" ]; then
    cp "$BEFORE" "$root/sandboxed-run-before"
    BEFORE="$root/sandboxed-run-before"
fi
export XDG_DATA_HOME="$root/data" XDG_STATE_HOME="$root/state"
mkdir -p "$root/vault"
"$bin" run --app bench -- /bin/true  # the container, outside the measurement
"$bin" pick --app bench --select "$root/vault" -o "$root/vault.bookmark" >/dev/null
grant="$bin run --app bench --grant VAULT=$root/vault.bookmark -- /bin/true"

hyperfine -N --warmup 30 --runs "$runs" --export-json "$root/results.json" \
    -n "true" "/bin/true" \
    -n "sandboxed-run --help (start-up only)" "$bin --help" \
    -n "sandboxed-run run" "$bin run --app bench -- /bin/true" \
    -n "sandboxed-run run --grant" "$grant" \
    -n "bwrap --ro-bind / /" "bwrap --ro-bind / / /bin/true" \
    -n "bwrap isolated" "bwrap --ro-bind / / --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
    >&2

python3 - "$root/results.json" "$bin" "$root/vault.bookmark" <<'PY'
import json, subprocess, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
bin, bookmark = sys.argv[2], sys.argv[3]
bwrap = results["bwrap --ro-bind / /"]["median"]
print(f"{'command':40} {'median ms':>10} {'mean ms':>9} {'/ bwrap minimal':>16}")
for name, r in results.items():
    print(f"{name:40} {r['median'] * 1e3:10.2f} {r['mean'] * 1e3:9.2f} {r['median'] / bwrap:16.2f}")
grant = results["sandboxed-run run --grant"]["median"] / results["sandboxed-run run"]["median"]
print(f"\nwith one grant: x{grant:.2f} of run without one")

def peak_rss(command):
    # GNU time is a small C parent: ru_maxrss is the launcher's own (and its waited children's).
    run = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True, check=True)
    return int(run.stderr.strip().splitlines()[-1])
print("\npeak resident memory, the largest process of each (KiB):")
for name, command in [("true", ["/bin/true"]),
                      ("bwrap isolated", ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--new-session", "--die-with-parent", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "/bin/true"]),
                      ("sandboxed-run run", [bin, "run", "--app", "bench", "--", "/bin/true"]),
                      ("sandboxed-run run --grant", [bin, "run", "--app", "bench", "--grant", "VAULT=" + bookmark, "--", "/bin/true"])]:
    print(f"  {name:38} {peak_rss(command):8d}")
PY

# The same commands in turns (Benchmarks/interleaved.c): one launch of each,
# in a shuffled order, per round, so that the VM's drift falls on all alike.
cc -O2 -o "$root/interleaved" Benchmarks/interleaved.c
before=()
if [ -n "${BEFORE:-}" ]; then
    before=("$BEFORE run --app bench -- /bin/true" "$BEFORE run --app bench --grant VAULT=$root/vault.bookmark -- /bin/true")
fi
"$root/interleaved" "$runs" 20 "/bin/true" "$bin --help" "$bin run --app bench -- /bin/true" "$grant" \
    "$(command -v bwrap) --ro-bind / / /bin/true" \
    "$(command -v bwrap) --ro-bind / / --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
    "${before[@]}" > "$root/interleaved.txt"
python3 - "$root/interleaved.txt" <<'PY'
import sys
names = ["true", "sandboxed-run --help (start-up only)", "sandboxed-run run", "sandboxed-run run --grant",
         "bwrap --ro-bind / /", "bwrap isolated"]
rows = [line.split()[:3] for line in open(sys.argv[1])]
median = {name: float(row[0]) for name, row in zip(names, rows)}
print(f"\nin turns ({len(rows)} commands, one launch each per round):")
print(f"{'command':40} {'median ms':>10} {'p25':>7} {'p75':>7} {'/ bwrap minimal':>16}")
for name, row in zip(names, rows):
    print(f"{name:40} {float(row[0]):10.2f} {float(row[1]):7.2f} {float(row[2]):7.2f} {float(row[0]) / median['bwrap --ro-bind / /']:16.2f}")
print(f"\nwith one grant, in turns: x{median['sandboxed-run run --grant'] / median['sandboxed-run run']:.2f} of run without one")
if len(rows) > len(names):
    old_run, old_grant = float(rows[6][0]), float(rows[7][0])
    print(f"\nthe older build (BEFORE), same turns: run {old_run:.2f} ms, --grant {old_grant:.2f} ms; "
          f"this build over it: run x{median['sandboxed-run run'] / old_run:.3f}, --grant x{median['sandboxed-run run --grant'] / old_grant:.3f}")
PY

# Where the wall-clock time goes, phase by phase (SANDBOXED_RUN_PHASES: the
# launcher's own clock between marks), medians of 200 launches each.
for label in run grant; do
    command="$bin run --app bench -- /bin/true"
    [ "$label" = grant ] && command="$grant"
    for i in $(seq 200); do SANDBOXED_RUN_PHASES=1 $command; done 2> "$root/phases-$label.txt"
done
python3 - "$root/phases-run.txt" "$root/phases-grant.txt" <<'PY'
import statistics, sys
def medians(path):
    phases = {}
    for line in open(path):
        words = line.split()
        if words and words[0] == "phase":
            phases.setdefault(" ".join(words[1:-1]), []).append(int(words[-1]))
    return {name: statistics.median(values) for name, values in phases.items()}
run, grant = medians(sys.argv[1]), medians(sys.argv[2])
print("\nwhere a launch's wall-clock time goes after main() (medians, µs; the rest is exec, start-up and exit):")
print(f"  {'phase':30} {'run':>7} {'--grant':>8}")
for name in run:
    print(f"  {name:30} {run[name]:7.0f} {grant.get(name, 0):8.0f}")
print(f"  {'total':30} {sum(run.values()):7.0f} {sum(grant.values()):8.0f}")
PY

# Where the time goes: perf's samples of 300 launches, by the phase each
# function belongs to (children included, so phases nest: the plan holds the checks).
if perf record -e cpu-clock -F 20000 -g -o "$root/perf.data" -- \
        sh -c "for i in \$(seq 300); do $bin run --app bench -- /bin/true; done" >/dev/null 2>&1; then
    perf report -i "$root/perf.data" --comm sandboxed-run --children --sort sym -g none 2>/dev/null > "$root/report.txt" || true
    python3 - "$root/report.txt" <<'PY'
import re, sys
phases = [
    ("main (everything after the runtime started)", "sandboxed_run_main"),
    ("  the plan (policy, checks, rules, filters)", "ConfinementPlanC_8features"),
    ("    protected-folder check", "checkNothingProtected"),
    ("    seccomp filter (shipped ones compiled in)", "SyscallFilterV7compile"),
    ("    Landlock ruleset", "ConfinementPlanC7ruleset"),
    ("  built-in policy (compiled in)", "PolicyV7builtin5named"),
    ("  launch (keeper, namespaces, exec, report)", "ConfinementPlanC6launch"),
    ("  Swift type metadata at first use", "swift_getTypeByMangledName"),
    ("dynamic loader, symbol lookups", "do_lookup_x"),
]
shares = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d.]+)%\s+[\d.]+%\s+\[[.k]\]\s+(\S+)", line)
    if not m: continue
    for _, key in phases:
        if key in m.group(2) and key not in shares: shares[key] = float(m.group(1))
print("\nwhere the launcher's time goes (share of its perf samples; the rest is the kernel's exec, page faults and exit):")
for label, key in phases:
    print(f"  {label:48} {shares.get(key, 0.0):5.1f}%")
PY
else
    echo "(perf is not available here: no breakdown)"
fi
