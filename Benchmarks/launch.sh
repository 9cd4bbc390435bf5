#!/usr/bin/env bash
# Launch cost of `sandboxed-run run -- /bin/true` (and with one grant), in
# the private view (the default) and the host view, against /bin/true and
# bubblewrap (minimal, "isolated", and building the same view as ours from
# the writer policy: Benchmarks/bwrap-view.py), measured in the same
# hyperfine run and again in turns (one launch of each per round, the
# steadier ratios; the targets' ratios come from these, each also in CPU
# time, which other load moves less than the wall clock), with peak memory,
# then where our launch time goes (phases, perf where the machine has it).
# Prints figures and ratios; asserts nothing (timing belongs here).
#   Benchmarks/launch.sh [RUNS]
#   BEFORE=/path/to/older/sandboxed-run Benchmarks/launch.sh [RUNS]
#     also runs an older build's `run` and `run --grant` in the same turns,
#     and prints this build's time over it (a change's cost, measured alike).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-300}"
scripts/install-deps
scripts/build-release >/dev/null
# Not under /tmp: the views (ours and bubblewrap's) have a /tmp of their own.
root="$(mktemp -d -p /var/tmp sandboxed-run-launch.XXXXXX)"
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
host="$bin run --app bench --view host -- /bin/true"
host_grant="$bin run --app bench --view host --grant VAULT=$root/vault.bookmark -- /bin/true"
container="$("$bin" run --app bench -- /usr/bin/printenv SANDBOX_CONTAINER)"
isolated="$(command -v bwrap) --ro-bind / / --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp"
isolated_grant="$(command -v bwrap) --ro-bind / / --bind $root/vault $root/vault --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp"
# bubblewrap building the view ours builds: the writer policy's system paths, the container, the grant.
mapfile -t same_view < <(python3 Benchmarks/bwrap-view.py Policies/writer.plist --bind "$container")
mapfile -t same_view_grant < <(python3 Benchmarks/bwrap-view.py Policies/writer.plist --bind "$container" --bind "$root/vault")
same_view[0]="$(command -v bwrap)"
same_view_grant[0]="$(command -v bwrap)"
same_view="${same_view[*]} /bin/true"
same_view_grant="${same_view_grant[*]} /bin/true"
$same_view && $same_view_grant || { echo "bubblewrap cannot build the policy's view: $same_view" >&2; exit 1; }

hyperfine -N --warmup 30 --runs "$runs" --export-json "$root/results.json" \
    -n "true" "/bin/true" \
    -n "sandboxed-run --help (start-up only)" "$bin --help" \
    -n "sandboxed-run run" "$bin run --app bench -- /bin/true" \
    -n "sandboxed-run run --grant" "$grant" \
    -n "bwrap --ro-bind / /" "bwrap --ro-bind / / /bin/true" \
    -n "bwrap isolated" "bwrap --ro-bind / / --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
    -n "sandboxed-run run --view host" "$host" \
    -n "sandboxed-run run --view host --grant" "$host_grant" \
    -n "bwrap isolated --bind V V" "$isolated_grant /bin/true" \
    -n "bwrap same view" "$same_view" \
    -n "bwrap same view --bind V V" "$same_view_grant" \
    >&2

python3 - "$root/results.json" "$bin" "$root/vault.bookmark" "$same_view" <<'PY'
import json, subprocess, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
bin, bookmark, same_view = sys.argv[2], sys.argv[3], sys.argv[4].split()
bwrap = results["bwrap --ro-bind / /"]["median"]
print(f"{'command':40} {'median ms':>10} {'mean ms':>9} {'/ bwrap minimal':>16}")
for name, r in results.items():
    print(f"{name:40} {r['median'] * 1e3:10.2f} {r['mean'] * 1e3:9.2f} {r['median'] / bwrap:16.2f}")
grant = results["sandboxed-run run --grant"]["median"] / results["sandboxed-run run"]["median"]
print(f"\nwith one grant: x{grant:.2f} of run without one (private view)")

def peak_rss(command):
    # GNU time is a small C parent: ru_maxrss is the launcher's own (and its waited children's).
    run = subprocess.run(["/usr/bin/time", "-f", "%M", *command], capture_output=True, text=True, check=True)
    return int(run.stderr.strip().splitlines()[-1])
print("\npeak resident memory, the largest process of each (KiB):")
for name, command in [("true", ["/bin/true"]),
                      ("bwrap isolated", ["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--new-session", "--die-with-parent", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "/bin/true"]),
                      ("bwrap same view", same_view),
                      ("sandboxed-run run", [bin, "run", "--app", "bench", "--", "/bin/true"]),
                      ("sandboxed-run run --grant", [bin, "run", "--app", "bench", "--grant", "VAULT=" + bookmark, "--", "/bin/true"]),
                      ("sandboxed-run run --view host", [bin, "run", "--app", "bench", "--view", "host", "--", "/bin/true"]),
                      ("sandboxed-run run --view host --grant", [bin, "run", "--app", "bench", "--view", "host", "--grant", "VAULT=" + bookmark, "--", "/bin/true"])]:
    kib = peak_rss(command)
    target = f"  (target <= 8 MB: {'met' if kib <= 8 * 1024 else 'MISSED'})" if name.startswith("sandboxed-run") else ""
    print(f"  {name:38} {kib:8d}{target}")
PY

# The same commands in turns (Benchmarks/interleaved.c): one launch of each,
# in a shuffled order, per round, so that the VM's drift falls on all alike.
cc -O2 -o "$root/interleaved" Benchmarks/interleaved.c
before=()
if [ -n "${BEFORE:-}" ]; then
    before=("$BEFORE run --app bench -- /bin/true" "$BEFORE run --app bench --grant VAULT=$root/vault.bookmark -- /bin/true")
fi
"$root/interleaved" "$runs" 20 "/bin/true" "$bin --help" "$bin run --app bench -- /bin/true" "$grant" \
    "$(command -v bwrap) --ro-bind / / /bin/true" "$isolated /bin/true" \
    "$host" "$host_grant" "$isolated_grant /bin/true" "$same_view" "$same_view_grant" \
    "${before[@]}" > "$root/interleaved.txt"
python3 - "$root/interleaved.txt" <<'PY'
import sys
names = ["true", "sandboxed-run --help (start-up only)", "sandboxed-run run", "sandboxed-run run --grant",
         "bwrap --ro-bind / /", "bwrap isolated",
         "sandboxed-run run --view host", "sandboxed-run run --view host --grant", "bwrap isolated --bind V V",
         "bwrap same view", "bwrap same view --bind V V"]
rows = [line.split()[:5] for line in open(sys.argv[1])]
median = {name: float(row[0]) for name, row in zip(names, rows)}
# CPU time (user and system, every process of the launch): less moved by other load than the wall clock.
cpu = {name: float(row[3]) for name, row in zip(names, rows)}
print(f"\nin turns ({len(rows)} commands, one launch each per round):")
print(f"{'command':40} {'median ms':>10} {'p25':>7} {'p75':>7} {'/ bwrap minimal':>16} {'CPU ms':>7} {'peak KiB':>9}")
for name, row in zip(names, rows):
    print(f"{name:40} {float(row[0]):10.2f} {float(row[1]):7.2f} {float(row[2]):7.2f} {float(row[0]) / median['bwrap --ro-bind / /']:16.2f}"
          f" {float(row[3]):7.2f} {int(row[4]):9d}")
def ratio(label, ours, theirs, target=None, goal=None):
    value = median[ours] / median[theirs]
    verdict = "" if target is None else f"  target <= {target}: {'met' if value <= target else 'MISSED'}" + (f", goal {goal}" if goal else "")
    print(f"  {label:62} x{value:.3f}{verdict}  (CPU x{cpu[ours] / cpu[theirs]:.3f})")
print("\nthe targets, ratios in these turns (medians of the wall clock; of CPU time in brackets):")
ratio("private run / bwrap isolated", "sandboxed-run run", "bwrap isolated", 1.2, 1.0)
ratio("private run --grant / bwrap isolated --bind V V", "sandboxed-run run --grant", "bwrap isolated --bind V V", 1.2, 1.0)
ratio("private run / bwrap same view", "sandboxed-run run", "bwrap same view", 1.0)
ratio("private run --grant / bwrap same view --bind V V", "sandboxed-run run --grant", "bwrap same view --bind V V", 1.0)
ratio("private run --grant / private run", "sandboxed-run run --grant", "sandboxed-run run", 1.15)
ratio("host run / bwrap isolated", "sandboxed-run run --view host", "bwrap isolated")
ratio("host run --grant / bwrap isolated --bind V V", "sandboxed-run run --view host --grant", "bwrap isolated --bind V V")
ratio("host run --grant / host run", "sandboxed-run run --view host --grant", "sandboxed-run run --view host", 1.15)
ratio("private run / host run (the view's cost)", "sandboxed-run run", "sandboxed-run run --view host")
ratio("bwrap same view / bwrap isolated", "bwrap same view", "bwrap isolated")
peak = {name: int(row[4]) for name, row in zip(names, rows)}
for name in ["sandboxed-run run", "sandboxed-run run --grant", "sandboxed-run run --view host --grant"]:
    print(f"  {'peak resident memory, ' + name[len('sandboxed-run '):]:62} {peak[name]:6d} KiB  target <= 8192: {'met' if peak[name] <= 8192 else 'MISSED'}")
if len(rows) > len(names):
    old_run, old_grant = float(rows[len(names)][0]), float(rows[len(names) + 1][0])
    old_cpu_run, old_cpu_grant = float(rows[len(names)][3]), float(rows[len(names) + 1][3])
    print(f"\nthe older build (BEFORE), same turns: run {old_run:.2f} ms, --grant {old_grant:.2f} ms; "
          f"this build over it: run x{median['sandboxed-run run'] / old_run:.3f}, --grant x{median['sandboxed-run run --grant'] / old_grant:.3f}; "
          f"CPU time: run x{cpu['sandboxed-run run'] / old_cpu_run:.3f}, --grant x{cpu['sandboxed-run run --grant'] / old_cpu_grant:.3f}; "
          f"peak KiB: run {rows[len(names)][4]}, --grant {rows[len(names) + 1][4]}")
PY

# Where the wall-clock time goes, phase by phase (SANDBOXED_RUN_PHASES: the
# launcher's own clock between marks), medians of 200 launches each.
# The four launches in turns, 200 rounds.
: > "$root/phases-run.txt"; : > "$root/phases-grant.txt"; : > "$root/phases-host.txt"; : > "$root/phases-host-grant.txt"
for i in $(seq 200); do
    SANDBOXED_RUN_PHASES=1 $bin run --app bench -- /bin/true 2>> "$root/phases-run.txt"
    SANDBOXED_RUN_PHASES=1 $grant 2>> "$root/phases-grant.txt"
    SANDBOXED_RUN_PHASES=1 $host 2>> "$root/phases-host.txt"
    SANDBOXED_RUN_PHASES=1 $host_grant 2>> "$root/phases-host-grant.txt"
done
python3 - "$root"/phases-{run,grant,host,host-grant}.txt <<'PY'
import statistics, sys
def medians(path):
    phases = {}
    for line in open(path):
        words = line.split()
        if words and words[0] == "phase":
            phases.setdefault(" ".join(words[1:-1]), []).append(int(words[-1]))
    return {name: statistics.median(values) for name, values in phases.items()}
columns = [medians(path) for path in sys.argv[1:]]
print("\nwhere a launch's wall-clock time goes after main() (medians, µs; the rest is exec, start-up and exit):")
print(f"  {'phase':30} {'private':>8} {'--grant':>8} {'host':>8} {'--grant':>8} {'private-host':>13}")
for name in columns[0]:
    values = [column.get(name, 0) for column in columns]
    print(f"  {name:30}" + "".join(f" {v:8.0f}" for v in values) + f" {values[0] - values[2]:13.0f}")
totals = [sum(column.values()) for column in columns]
print(f"  {'total':30}" + "".join(f" {v:8.0f}" for v in totals) + f" {totals[0] - totals[2]:13.0f}")
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
