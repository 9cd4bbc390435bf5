"""Staged grants against plain grants, in one interleaved run (Benchmarks/staging.sh).

    python3 Benchmarks/staging.py SANDBOXED_RUN ROOT ROUNDS

Each round runs every measure once (most launches LAUNCHES times), in a
shuffled order, so that the VM's drift falls on all alike; whatever a
measure needs first (the staged changes to accept, the files cp copies) is
made before the round's timed runs and is not timed. A ratio is the median
of the staged runs over the median of the plain ones, in wall-clock time
and in CPU time (user and system of every process waited for, which other
load moves less). Creating and reading are timed inside the sandbox, by the
command itself (the launch is measured on its own); the whole run around
them is printed too.
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

binary, root, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
LAUNCHES = 5  # each launch measure, per round (but the first with 2,000 files)
FILES, FOLDERS = 2000, 20

# Run inside the sandbox, on the grant $SANDBOX_GRANT_V; each prints its own
# wall-clock and CPU seconds for the timed part.
CREATE = """
import os, shutil, time
top = os.path.join(os.environ["SANDBOX_GRANT_V"], "new-%d" % os.getpid())
os.mkdir(top)
for k in range(20): os.mkdir("%s/f%02d" % (top, k))
w, c = time.perf_counter(), time.process_time()
for i in range(2000):
    with open("%s/f%02d/n%d.md" % (top, i % 20, i), "w") as f: f.write("x" * 200)
w, c = time.perf_counter() - w, time.process_time() - c
shutil.rmtree(top)
print(w, c)
"""
READ = """
import glob, os, time
w, c = time.perf_counter(), time.process_time()
n = 0
for name in sorted(glob.glob(os.environ["SANDBOX_GRANT_V"] + "/f*/*.md")):
    with open(name, "rb") as f: n += len(f.read())
w, c = time.perf_counter() - w, time.process_time() - c
assert n == 2000 * 2048, n
print(w, c)
"""
# Rewrites every file of the grant with this round's bytes (the changes to accept).
MODIFY = """
import glob, os, sys
top = os.environ["SANDBOX_GRANT_V"]
for name in glob.glob(top + "/f*/*.md"):
    with open(name, "w") as f: f.write(("round %s %s " % (sys.argv[1], name[len(top):])).ljust(2100, "y"))
"""


def changed_bytes(round_, relative):
    return ("round %s %s " % (round_, relative)).ljust(2100, "y")


def make_folder(path, files, folders):
    os.makedirs(path)
    for k in range(folders):
        os.mkdir("%s/f%02d" % (path, k + 1))
    for i in range(files):
        with open("%s/f%02d/n%d.md" % (path, i % folders + 1, i), "w") as f:
            f.write(("%d " % i).ljust(2048, "z"))


def check(argv, **kwargs):
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"staging.py: {' '.join(argv)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result.stdout


def timed(argv, environment=None):
    """Wall-clock ms, CPU ms (the process and every one it waited for), stdout, stderr."""
    out = os.path.join(root, "out")
    err = os.path.join(root, "err")
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
               (os.POSIX_SPAWN_OPEN, 2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)]
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, environment or os.environ, file_actions=actions)
    _, status, usage = os.wait4(pid, 0)
    wall = (time.perf_counter() - start) * 1e3
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"staging.py: {' '.join(argv)} failed ({os.waitstatus_to_exitcode(status)}):\n"
                 + open(out).read() + open(err).read())
    return wall, (usage.ru_utime + usage.ru_stime) * 1e3, open(out).read(), open(err).read()


# The folders: 2,000 files of 2 KiB in 20 folders, and 10; a copy of the
# first for accept, and two more for cp -a (from, to).
big, small, accepted, cp_from, cp_to = (os.path.join(root, name) for name in ["big", "small", "accepted", "cp-from", "cp-to"])
make_folder(big, FILES, FOLDERS)
make_folder(small, 10, 1)
for folder in [accepted, cp_from, cp_to]:
    shutil.copytree(big, folder)
check(["sync"])


def bookmark(app, folder):
    path = os.path.join(root, f"{app}-{os.path.basename(folder)}.bookmark")
    check([binary, "pick", "--app", app, "--select", folder, "-o", path])
    return path


def run(app, bookmark_, command, review=False):
    return [binary, "run", "--app", app] + (["--review"] if review else []) + ["--grant", "V=" + bookmark_, "--"] + command


# bench.plain: plain grants. bench.staged: staged grants that hold one staged
# change (a later run reuses the clone). bench.first: staged grants with no
# staged change: each run clones the folder, finds no change and discards
# the clone (a first launch). bench.accept: the changes accepted.
plain = {folder: bookmark("bench.plain", folder) for folder in [big, small]}
staged = {folder: bookmark("bench.staged", folder) for folder in [big, small]}
first = {folder: bookmark("bench.first", folder) for folder in [big, small]}
accept_bookmark = bookmark("bench.accept", accepted)
for folder in [big, small]:
    check(run("bench.staged", staged[folder], ["/bin/sh", "-c", 'echo staged > "$SANDBOX_GRANT_V/staged-marker"'], review=True))
listed = check([binary, "review", "list", "--app", "bench.staged", "--json"])
assert listed.count('"added"') == 2, listed

python = "/usr/bin/python3"
measures = {
    "create plain": run("bench.plain", plain[big], [python, "-c", CREATE]),
    "create staged": run("bench.staged", staged[big], [python, "-c", CREATE], review=True),
    "read plain": run("bench.plain", plain[big], [python, "-c", READ]),
    "read staged": run("bench.staged", staged[big], [python, "-c", READ], review=True),
    "accept": [binary, "review", "accept", "--app", "bench.accept"],
    "cp -a + sync": ["/bin/sh", "-c", f"cp -a {cp_from}/. {cp_to}/ && sync"],
}
launches = {}
for folder, size in [(small, "10"), (big, "2,000")]:
    launches[f"launch {size} plain"] = run("bench.plain", plain[folder], ["/bin/true"])
    launches[f"launch {size} first"] = run("bench.first", first[folder], ["/bin/true"], review=True)
    launches[f"launch {size} later"] = run("bench.staged", staged[folder], ["/bin/true"], review=True)
wall = {name: [] for name in list(measures) + list(launches)}
cpu = {name: [] for name in wall}
inner_wall = {name: [] for name in measures if name.startswith(("create", "read"))}
inner_cpu = {name: [] for name in inner_wall}

random.seed(32)
warmup = 1
started = time.time()
for round_ in range(-warmup, rounds):
    # Untimed: this round's changes staged in bench.accept, the same bytes
    # in cp's source, and everything on disk.
    check(run("bench.accept", accept_bookmark, [python, "-c", MODIFY, str(round_)], review=True))
    for k in range(FOLDERS):
        for name in os.listdir(f"{cp_from}/f{k + 1:02d}"):
            with open(f"{cp_from}/f{k + 1:02d}/{name}", "w") as f:
                f.write(changed_bytes(round_, f"/f{k + 1:02d}/{name}"))
    check(["sync"])
    # A first launch with the grant of 2,000 files takes seconds (it clones): once a round.
    order = list(measures) + [name for name in launches for _ in range(1 if name == "launch 2,000 first" else LAUNCHES)]
    random.shuffle(order)
    for name in order:
        w, c, out, _ = timed(measures.get(name) or launches[name])
        if round_ < 0:
            continue
        wall[name].append(w)
        cpu[name].append(c)
        if name in inner_wall:
            seconds, cpu_seconds = map(float, out.split())
            inner_wall[name].append(seconds * 1e3)
            inner_cpu[name].append(cpu_seconds * 1e3)
    # What was accepted is in the folder, and nothing stayed staged; cp copied alike.
    for relative in ["/f01/n0.md", f"/f{FOLDERS:02d}/n{FILES - 1}.md"]:
        assert open(accepted + relative).read() == changed_bytes(round_, relative), relative
        assert open(cp_to + relative).read() == changed_bytes(round_, relative), relative
    assert "no staged changes" in subprocess.run([binary, "review", "list", "--app", "bench.accept"],
                                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
assert "no staged changes" in subprocess.run([binary, "review", "list", "--app", "bench.first"],
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
elapsed = time.time() - started


def med(values):
    return statistics.median(values)


def quartiles(values):
    q = statistics.quantiles(values, n=4)
    return f"{q[0]:.1f}–{q[2]:.1f}"


load = open("/proc/loadavg").read().split()[:3]
print(f"staged grants against plain grants: one interleaved run, {rounds} rounds (+{warmup} warm-up), "
      f"each launch {LAUNCHES} times a round (the first with 2,000 files once); {elapsed / 60:.1f} min; load average at the end {' '.join(load)}")
print(f"folders: {FILES:,} files of 2 KiB in {FOLDERS} folders, and 10; kernel {os.uname().release}; "
      f"{' '.join(subprocess.run(['findmnt', '-n', '-o', 'FSTYPE,SOURCE,OPTIONS', '-T', root], stdout=subprocess.PIPE, text=True).stdout.split())}")
print("medians in ms (p25–p75); ratio = staged median / plain median, wall clock and CPU time\n")
rows = []


def row(label, staged_name, plain_name, target=None, values=(wall, cpu), note=""):
    w, c = values
    ratio_w = med(w[staged_name]) / med(w[plain_name])
    ratio_c = med(c[staged_name]) / med(c[plain_name])
    verdict = "" if target is None else (f"≤ {target}: " + ("met" if ratio_w <= target else "MISSED"))
    rows.append((label, f"{med(w[plain_name]):.1f} ({quartiles(w[plain_name])})", f"{med(w[staged_name]):.1f} ({quartiles(w[staged_name])})",
                 f"{ratio_w:.3f}", f"{ratio_c:.3f}", verdict, note))


row("create 2,000 files (timed in the sandbox)", "create staged", "create plain", 1.15, (inner_wall, inner_cpu))
row("read 2,000 unmodified files (timed in the sandbox)", "read staged", "read plain", 1.05, (inner_wall, inner_cpu))
row("launch /bin/true, grant of 10 files, first", "launch 10 first", "launch 10 plain", 1.1, note="clones, finds no change, discards")
row("launch /bin/true, grant of 10 files, later", "launch 10 later", "launch 10 plain", 1.1, note="reuses the clone")
row("launch /bin/true, grant of 2,000 files, first", "launch 2,000 first", "launch 2,000 plain", 1.1, note="clones, finds no change, discards")
row("launch /bin/true, grant of 2,000 files, later", "launch 2,000 later", "launch 2,000 plain", 1.1, note="reuses the clone")
row("review accept of 2,000 changed files", "accept", "cp -a + sync", note="against cp -a + sync (no target)")
row("whole run: create 2,000 files", "create staged", "create plain", note="launch + create + end of run")
row("whole run: read 2,000 files", "read staged", "read plain", note="launch + read + end of run")
headers = ("measure", "plain ms", "staged ms", "wall ×", "CPU ×", "target", "")
widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
for r in [headers] + rows:
    print("  ".join(str(v).ljust(widths[i]) for i, v in enumerate(r)).rstrip())
print(f"CPU time, medians: review accept {med(cpu['accept']):.0f} ms, cp -a + sync {med(cpu['cp -a + sync']):.0f} ms; "
      f"launch with 2,000 files: plain {med(cpu['launch 2,000 plain']):.1f} ms, first {med(cpu['launch 2,000 first']):.1f} ms, "
      f"later {med(cpu['launch 2,000 later']):.1f} ms")

# Where a staged launch's time goes: the launcher's phases
# (SANDBOXED_RUN_PHASES=1) end when the command has ended; the staging
# before it is in "request" (the bookmark resolved, the folder cloned or the
# clone reused), the end of the run (the change list, flushing, discarding
# a clone with no change) is what the wall clock has after the last phase,
# beyond a plain launch's (start-up and exit). In turns, ROUNDS rounds.
phase_names = ["launch 2,000 plain", "launch 2,000 first", "launch 2,000 later"]
request, after = {name: [] for name in phase_names}, {name: [] for name in phase_names}
environment = dict(os.environ, SANDBOXED_RUN_PHASES="1")
for _ in range(rounds):
    for name in random.sample(phase_names, len(phase_names)):
        w, _, _, err = timed(launches[name], environment)
        phases = {}
        for line in err.splitlines():
            words = line.split()
            if words and words[0] == "phase":
                phases[" ".join(words[1:-1])] = int(words[-1]) / 1e3
        request[name].append(phases["request"])
        after[name].append(w - sum(phases.values()))
print(f"\nwhere a launch with the grant of 2,000 files goes (medians of {rounds}, ms): staging at launch = the 'request' phase; "
      "end of run = wall clock after the last phase, less a plain launch's")
base_request, base_after = med(request["launch 2,000 plain"]), med(after["launch 2,000 plain"])
for name in phase_names:
    print(f"  {name:20} request {med(request[name]):7.1f} (+{med(request[name]) - base_request:6.1f})   "
          f"end of run +{med(after[name]) - base_after:6.1f}")

# Where accept's time goes. One accept as in the run, its CPU time split
# into user and system; then one under strace, stopping only at fsync,
# renameat and unlinkat (--seccomp-bpf: the other calls run untraced):
# the change list before the first file, the files applied, and what
# follows the last (the change list again, the clone discarded).
def stage_for_accept(label):
    check(run("bench.accept", accept_bookmark, [python, "-c", MODIFY, label], review=True))
    check(["sync"])


stage_for_accept("split")
before = os.times()
w, _, _, _ = timed([binary, "review", "accept", "--app", "bench.accept"])
after_ = os.times()
user, system = (after_.children_user - before.children_user) * 1e3, (after_.children_system - before.children_system) * 1e3
stage_for_accept("traced")
trace = os.path.join(root, "strace.txt")
start = time.time()
check(["strace", "--seccomp-bpf", "-f", "-ttt", "-T", "-e", "trace=fsync,syncfs,renameat,unlinkat,exit_group", "-o", trace,
       binary, "review", "accept", "--app", "bench.accept"])
calls = []
for line in open(trace):
    words = line.split()
    if len(words) > 2 and "(" in words[2]:
        took = float(line.rsplit("<", 1)[1].rstrip(">\n")) if line.rstrip().endswith(">") else 0.0
        calls.append((float(words[1]), words[2].split("(")[0], took, line))
end = calls[-1][0]
# Files go in batches: written ahead unnamed, one syncfs a batch, then each renamed over its item.
flushes = [c for c in calls if c[1] in ("fsync", "syncfs")]
renames = [c for c in calls if c[1] == "renameat" and ".sr-" in c[3]]
unlinks = [c for c in calls if c[1] == "unlinkat"]
first = min([c[0] for c in flushes + renames] or [end])
last = renames[-1][0] if renames else first
print(f"\nwhere review accept's time goes ({FILES:,} changed files): untraced {w:.0f} ms, CPU {user:.0f} ms user + {system:.0f} ms system; "
      f"under strace (stopping at fsync, syncfs, renameat, unlinkat only) {1e3 * (end - start):.0f} ms:")
print(f"  before the first flush or rename (start-up, the change list)  {1e3 * (first - start):7.0f} ms")
print(f"  applying the files (first flush to last rename)               {1e3 * (last - first):7.0f} ms, "
      f"of which {len(flushes):,} flushes (fsync, syncfs) {1e3 * sum(c[2] for c in flushes):.0f} ms ({len(renames):,} renames)")
print(f"  after the last (the change list again, the clone discarded)   {1e3 * (end - last):7.0f} ms, "
      f"of which {len(unlinks):,} unlinkat {1e3 * sum(c[2] for c in unlinks):.0f} ms")
