#!/usr/bin/env python3
"""Live grants, measured (Benchmarks/live-grants.sh runs this with the release build):
- attach: start-accessing over the wire, from the request sent to the reply read, then
  stop-accessing (detach), each confirmed by a stat in the folder;
- revoke: `grants revoke` while the command stats a file of a started folder in a loop,
  from `revoke` returning to the first failed stat (and from `revoke` starting);
- open + read + close of a 4 KiB file in a live grant against the same file through a
  launch-time grant of the same folder, in turns (Benchmarks/live-grants-open.c);
- the launch (`run -- /bin/true`) of a policy with the live-grant keys against the same
  policy without them, in turns (Benchmarks/interleaved.c).
Prints figures and ratios; asserts nothing."""
import os, statistics, subprocess, sys, time

bin, root, interleaved, opener = sys.argv[1:5]
rounds = int(sys.argv[5])
keys, bare = root + "/keys.plist", root + "/bare.plist"
app = "bench.live"
vault = root + "/vault"


def run(args, **kw):
    return subprocess.run([bin] + args, check=True, capture_output=True, text=True, **kw)


container = run(["run", "--app", app, "--policy", keys, "--", "/bin/sh", "-c", 'printf %s "$SANDBOX_CONTAINER"']).stdout


def pick(name):
    out = run(["pick", "--app", app, "--select", vault, "-o", container + "/" + name])
    return (out.stdout + out.stderr).split("(grant ")[-1][:12]


CLIENT = r'''
import os, socket, struct, sys, time
s = socket.socket(fileno=int(os.environ["SANDBOXED_RUN_BROKER_FD"]))
def ask(op, payload):
    s.send(struct.pack("<BBBBH", 1, op, 0, 0, len(payload)) + payload)
    r = s.recv(20000)
    assert r[1] == 0, r
    return r[4:4 + struct.unpack_from("<H", r, 2)[0]].decode()
'''

# Attach and detach, as the command sees them.
pick("attach.bookmark")
attach_script = CLIENT + r'''
blob = open(os.environ["SANDBOX_CONTAINER"] + "/attach.bookmark", "rb").read()
starts, stops = [], []
for i in range(int(sys.argv[1])):
    t0 = time.perf_counter_ns(); p = ask(2, blob); os.stat(p + "/file"); t1 = time.perf_counter_ns()
    ask(3, blob)
    try: os.stat(p + "/file"); raise SystemExit("still reachable after stop")
    except FileNotFoundError: pass
    t2 = time.perf_counter_ns()
    starts.append(t1 - t0); stops.append(t2 - t1)
first = starts[0]
starts.sort(); stops.sort()
print(starts[len(starts) // 2], stops[len(stops) // 2], starts[len(starts) * 9 // 10], stops[len(stops) * 9 // 10], first)
'''
out = run(["run", "--app", app, "--policy", keys, "--", "python3", "-c", attach_script, str(rounds)]).stdout.split()
start, stop, start90, stop90, _ = (int(x) / 1e3 for x in out)
print(f"start-accessing (resolve + attach, round trip, confirmed by a stat): median {start:.0f} us, 90th {start90:.0f} us")
# The first attach of a sandbox forks the grant helper: fresh sandboxes, one attach each.
firsts = sorted(int(run(["run", "--app", app, "--policy", keys, "--", "python3", "-c", attach_script, "1"]).stdout.split()[4]) / 1e3
                for _ in range(max(5, rounds // 10)))
print(f"first start-accessing of a sandbox (the grant helper forked): median {statistics.median(firsts):.0f} us, max {max(firsts):.0f} us ({len(firsts)} sandboxes)")
print(f"stop-accessing (detach, round trip, confirmed by a failed stat):     median {stop:.0f} us, 90th {stop90:.0f} us")

# Revoke while the command loops.
revoke_script = CLIENT + r'''
blob = open(os.environ["SANDBOX_CONTAINER"] + "/" + sys.argv[1], "rb").read()
p = ask(2, blob) + "/file"
open(os.environ["SANDBOX_CONTAINER"] + "/ready", "w").close()
deadline = time.time() + 10
while time.time() < deadline:
    try: os.stat(p)
    except OSError: break
print(time.time_ns())
'''
after, since = [], []
for trial in range(int(os.environ.get("REVOKE_TRIALS", "20"))):
    name = f"revoke-{trial}.bookmark"
    grant = pick(name)
    ready = container + "/ready"
    if os.path.exists(ready):
        os.unlink(ready)
    command = subprocess.Popen([bin, "run", "--app", app, "--policy", keys, "--", "python3", "-c", revoke_script, name],
                               stdout=subprocess.PIPE, text=True)
    while not os.path.exists(ready):
        time.sleep(0.01)
    time.sleep(0.1)
    begun = time.time_ns()
    run(["grants", "revoke", "--grant", grant])
    done = time.time_ns()
    failed = int(command.communicate()[0].split()[-1])
    after.append((failed - done) / 1e6)
    since.append((failed - begun) / 1e6)
print(f"grants revoke -> unreachable in the running command ({len(after)} trials): from revoke's return median {statistics.median(after):.2f} ms, "
      f"max {max(after):.2f} ms; from revoke's start median {statistics.median(since):.2f} ms, max {max(since):.2f} ms")

# The same for a grant given at launch (--grant): its own mount in the view.
launch_revoke_script = r'''
import os, sys, time
p = os.environ["SANDBOX_GRANT_V"] + "/file"
open(os.environ["SANDBOX_CONTAINER"] + "/ready", "w").close()
deadline = time.time() + 10
while time.time() < deadline:
    try: os.stat(p)
    except OSError: break
print(time.time_ns())
'''
after = []
for trial in range(int(os.environ.get("REVOKE_TRIALS", "20"))):
    name = f"launch-revoke-{trial}.bookmark"
    grant = pick(name)
    ready = container + "/ready"
    if os.path.exists(ready):
        os.unlink(ready)
    command = subprocess.Popen([bin, "run", "--app", app, "--policy", keys, "--grant", f"V={container}/{name}", "--", "python3", "-c", launch_revoke_script],
                               stdout=subprocess.PIPE, text=True)
    while not os.path.exists(ready):
        time.sleep(0.01)
    time.sleep(0.1)
    run(["grants", "revoke", "--grant", grant])
    done = time.time_ns()
    after.append((int(command.communicate()[0].split()[-1]) - done) / 1e6)
print(f"grants revoke of a launch-time grant -> unreachable ({len(after)} trials): from revoke's return median {statistics.median(after):.2f} ms, max {max(after):.2f} ms")

# open + read + close: a live grant against a launch-time grant of the same folder.
pick("open.bookmark")
pick("launch.bookmark")
import shutil
shutil.copy(opener, container + "/live-grants-open")
open_script = 'p=$("$SANDBOXED_RUN" start-accessing "$SANDBOX_CONTAINER/open.bookmark") && "$SANDBOX_CONTAINER/live-grants-open" 200 2000 "$p/file" "$SANDBOX_GRANT_VAULT/file"'
live, launch = (float(x) for x in run(["run", "--app", app, "--policy", keys, "--grant", "VAULT=" + container + "/launch.bookmark",
                                         "--", "/bin/sh", "-c", open_script]).stdout.split())
print(f"open + read + close of 4 KiB: live grant {live:.0f} ns, launch-time grant {launch:.0f} ns: x{live / launch:.3f}")

# Launch with and without the live-grant keys.
lines = subprocess.run([interleaved, str(rounds), "20",
                        f"{bin} run --app {app} --policy {keys} -- /bin/true",
                        f"{bin} run --app {app} --policy {bare} -- /bin/true"],
                       check=True, capture_output=True, text=True).stdout.splitlines()
with_keys, without = (float(line.split()[0]) for line in lines[:2])
print(f"run -- /bin/true, policy with the live-grant keys {with_keys:.2f} ms, without {without:.2f} ms: x{with_keys / without:.3f}")
