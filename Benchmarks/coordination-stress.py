"""What a writer was told landed, landed: counted.

Writers append records to a few notes in a vault while the sync simulator
edits the notes, evicts them to placeholders, brings them back and makes
conflict versions; writers and the simulator are killed with SIGKILL at random
instants and started again. Writers are `sandboxed-run append` processes and
confined writers (`sandboxed-run run --grant`) running PROTOCOL.md's own Python
writer (long records too, which cross pages and are journaled) and, from inside
the sandbox, `$SANDBOXED_RUN append`. Every writer logs each record it got
success for. At the end the simulator runs once more and stops cleanly (every
placeholder materialised), and every acknowledged record is looked for in the
notes, conflict versions and the simulator's copies: lost must be 0, and every
line there must be a whole record (torn 0).

Usage: python3 coordination-stress.py SANDBOXED_RUN [--seconds S] [--seeds 1,2,3] [--json]
Prints per seed: acknowledged, lost, torn, throughput, the simulator's counts.
Exit status 1 when anything was lost or torn, or the clean stop left a
placeholder or a temporary file behind.
"""
import argparse, json, os, random, re, shutil, signal, subprocess, sys, tempfile, threading, time, zlib

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOL = os.path.join(HERE, "..", "Sources", "Coordination", "PROTOCOL.md")

# The notes: a short name, one long enough for the hashed stem (240 bytes), one not UTF-8.
# Most records go to the first: contention on one note is where races show.
NOTES = [b"daily.md", b"n" * 237 + b".md", b"caf\xe9.md"]
WEIGHTS = [0.7, 0.15, 0.15]

RECORD = re.compile(rb"^(?P<writer>[a-z]\d+) (?P<seq>\d+) (?P<pad>x*) (?P<crc>[0-9a-f]{8})$")
OTHER = re.compile(rb"^(# note|remote edit \d+|remote change \d+)$")


def record(writer, seq, long):
    body = b"%s %d %s" % (writer.encode(), seq, b"x" * (5000 if long else random.randint(0, 60)))
    return body + b" %08x" % zlib.crc32(body)


def whole(line):
    match = RECORD.match(line)
    if not match:
        return None
    body = line[: line.rfind(b" ")]
    return (match["writer"], int(match["seq"])) if b"%08x" % zlib.crc32(body) == match["crc"] else None


def protocol_python():
    text = open(PROTOCOL, encoding="utf-8").read()
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("\n```", start)]


# The confined writer: PROTOCOL.md's writer, and every third record `$SANDBOXED_RUN append`.
CONFINED = protocol_python() + r'''
import random, subprocess, sys, time, zlib
vault = os.environ["SANDBOX_GRANT_VAULT"]
folder = os.open(vault, os.O_RDONLY | os.O_DIRECTORY)
writer, first, until, seed = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
notes = [bytes.fromhex(n) for n in sys.argv[5:]]
weights = [0.7] + [0.3 / (len(notes) - 1)] * (len(notes) - 1) if len(notes) > 1 else [1]
rng = random.Random(seed)
seq = first
while time.time() < until:
    name = rng.choices(notes, weights)[0]
    long = rng.random() < 0.15
    body = b"%s %d %s" % (writer.encode(), seq, b"x" * (5000 if long else rng.randint(0, 60)))
    line = body + b" %08x" % zlib.crc32(body)
    try:
        if seq % 3 == 0:
            status = subprocess.run([os.environ["SANDBOXED_RUN"], "append", "--download", "5", "--timeout", "10",
                                     os.path.join(vault.encode(), name), line], stderr=subprocess.DEVNULL).returncode
            if status != 0:
                raise OSError("append exited %d" % status)
        else:
            deadline = time.time() + 5
            while True:
                try:
                    append(folder, name, line)
                    break
                except Evicted:
                    # Ask the daemon for it, as a confined writer does, and wait.
                    os.close(os.open(stem(name) + b".icloud.download", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=folder))
                    if time.time() > deadline:
                        raise
                    time.sleep(0.02)
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.flush()
    except OSError:
        pass
    seq += 1
'''


class Run:
    def __init__(self, binary, seconds, seed, scratch, rates):
        self.binary, self.seconds, self.seed, self.rates = binary, seconds, seed, rates
        self.rng = random.Random(seed)
        self.base = tempfile.mkdtemp(prefix="coordination-stress-", dir=scratch)
        self.vault = os.path.join(self.base, "vault")
        os.mkdir(self.vault)
        self.env = dict(os.environ, HOME=self.base, XDG_DATA_HOME=self.base + "/data", XDG_STATE_HOME=self.base + "/state")
        self.acked = {}  # (writer, seq) -> line
        self.lock = threading.Lock()
        self.kills = {"append": 0, "confined": 0, "simulator": 0}
        self.simulated = {}  # the counts of the simulators that stopped cleanly
        self.stop = threading.Event()

    def vault_path(self, note):
        return os.fsencode(self.vault) + b"/" + note

    def ack(self, line):
        key = whole(line)
        if key is None:
            raise SystemExit("a writer acknowledged a malformed record: %r" % line[:80])
        with self.lock:
            self.acked[key] = line

    def appender(self, index):
        """`sandboxed-run append` one process per record; a few killed at random instants."""
        seq = 0
        writer = "a%d" % index
        rng = random.Random(self.seed * 100 + index)
        while not self.stop.is_set():
            note = rng.choices(NOTES, WEIGHTS)[0]
            line = record(writer, seq, rng.random() < 0.1)
            process = subprocess.Popen([self.binary, "append", "--download", "5", "--timeout", "10", self.vault_path(note), line],
                                       env=self.env, stderr=subprocess.DEVNULL)
            if rng.random() < 0.08:
                time.sleep(rng.random() * 0.02)
                process.kill()
                self.kills["append"] += 1
            if process.wait() == 0:
                self.ack(line)
            seq += 1

    def confined(self, index):
        """Confined writers, restarted after each random kill, numbering on where they were."""
        writer = "c%d" % index
        rng = random.Random(self.seed * 1000 + index)
        seq = 0
        notes = [n.hex() for n in NOTES]
        while not self.stop.is_set():
            until = self.deadline
            process = subprocess.Popen([self.binary, "run", "--app", "com.example.stress", "--grant", "VAULT=" + self.bookmark, "--",
                                        "/usr/bin/python3", "-c", CONFINED, writer, str(seq), str(until), str(rng.randrange(1 << 30))] + notes,
                                       env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            killer = threading.Timer(rng.uniform(0.5, 4), lambda p=process: (p.kill(), self.kills.__setitem__("confined", self.kills["confined"] + 1))
                                     if p.poll() is None and time.time() < self.deadline else None)
            killer.start()
            for line in process.stdout:
                line = line.rstrip(b"\n")
                self.ack(line)
                seq = max(seq, whole(line)[1] + 1)
            process.wait()
            killer.cancel()
            seq += 1000  # a record in flight when killed may still have landed: never reuse its number

    def simulator(self):
        """The daemon with edits, evictions and conflicts; killed at random (SIGKILL), or
        stopped (SIGTERM, leaving its placeholders), and started again."""
        while not self.stop.is_set():
            process = subprocess.Popen([self.binary, "sync-simulator", self.vault, "--edit-rate", "%.6f" % self.rates[0], "--evict-rate", "%.6f" % self.rates[1],
                                        "--conflict-rate", "%.6f" % self.rates[2], "--seed", str(self.rng.randrange(1 << 30)), "--leave-placeholders"],
                                       env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self.stop.wait(self.rng.uniform(0.5, 3))
            if self.rng.random() < 0.5:
                process.kill()
                self.kills["simulator"] += 1
            else:
                process.terminate()
            out = process.communicate()[0].decode()
            if process.returncode == 0:
                counts = dict((k, int(v)) for k, v in re.findall(r"([a-z ]+?) (\d+)(?:,|$)", out.strip()))
                for key, value in counts.items():
                    self.simulated[key.strip()] = self.simulated.get(key.strip(), 0) + value

    def go(self):
        for note in NOTES:
            with open(self.vault_path(note), "wb") as f:
                f.write(b"# note\n")
        self.bookmark = self.base + "/vault.bookmark"
        subprocess.run([self.binary, "pick", "--app", "com.example.stress", "--select", self.vault, "-o", self.bookmark],
                       env=self.env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.time()
        self.deadline = started + self.seconds
        threads = [threading.Thread(target=self.simulator)]
        threads += [threading.Thread(target=self.appender, args=(i,)) for i in range(2)]
        threads += [threading.Thread(target=self.confined, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        time.sleep(self.seconds)
        self.stop.set()
        for thread in threads:
            thread.join()
        elapsed = time.time() - started
        # A clean stop brings every placeholder back.
        final = subprocess.run([self.binary, "sync-simulator", self.vault, "--edit-rate", "0", "--seconds", "1"],
                               env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return elapsed, final

    def count(self):
        found, torn, files = set(), [], 0
        left, placeholders = [], []
        for folder, _, names in os.walk(os.fsencode(self.vault)):
            for name in names:
                path = os.path.join(folder, name)
                inside_versions = b"/.sandboxed-run-versions/" in path
                if name.endswith(b".icloud") or name.endswith(b".icloud.data"):
                    placeholders.append(path)  # a clean stop brings every file back
                if name.startswith(b".") and not name.endswith(b".icloud.data"):
                    if not name.endswith(b".icloud") or inside_versions:
                        left.append(path)  # temporaries, journals, requests: a clean stop leaves none
                    continue
                files += 1
                data = open(path, "rb").read()
                for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
                    key = whole(line)
                    if key is not None:
                        found.add(key)
                    elif line and not OTHER.match(line):
                        torn.append((path, line[:60]))
        lost = [self.acked[key] for key in self.acked if key not in found]
        return lost, torn, files, left, placeholders


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--self-check", action="store_true",
                        help="after the run, plant a torn line and claim a record that never landed: the count must find both")
    parser.add_argument("--scratch", default=None)
    parser.add_argument("--edit-rate", type=float, default=50)
    parser.add_argument("--evict-rate", type=float, default=50)
    parser.add_argument("--conflict-rate", type=float, default=10)
    options = parser.parse_args()
    results = []
    for seed in (int(s) for s in options.seeds.split(",")):
        random.seed(seed)
        run = Run(options.binary, options.seconds, seed, options.scratch, (options.edit_rate, options.evict_rate, options.conflict_rate))
        try:
            elapsed, final = run.go()
            if options.self_check:
                with open(run.vault_path(NOTES[0]), "ab") as f:
                    f.write(record("z0", 0, False)[:-3] + b"\n")
                run.acked[(b"z0", 1)] = record("z0", 1, False)
            lost, torn, files, left, placeholders = run.count()
            result = {"seed": seed, "acknowledged": len(run.acked), "lost": len(lost), "torn": len(torn),
                      "per_second": round(len(run.acked) / elapsed, 1), "kills": run.kills, "files": files, "simulated": run.simulated,
                      "left": [p.decode("utf-8", "replace") for p in left],
                      "placeholders": [p.decode("utf-8", "replace") for p in placeholders],
                      "final_simulator": final.stdout.decode().strip(), "final_status": final.returncode,
                      "lost_examples": [l[:60].decode("utf-8", "replace") for l in lost[:5]],
                      "torn_examples": [repr(t) for t in torn[:5]]}
            results.append(result)
            if not options.json:
                print("seed %d: acknowledged %d, lost %d, torn %d, %.1f acknowledged appends/s; killed %s; %d files; "
                      "left behind %d, placeholders %d\n    simulators stopped cleanly did: %s\n    final simulator (exit %d): %s"
                      % (seed, result["acknowledged"], result["lost"], result["torn"], result["per_second"], run.kills, files, len(left),
                         len(placeholders), run.simulated, final.returncode, result["final_simulator"]))
                for example in result["lost_examples"] + result["torn_examples"] + result["left"] + result["placeholders"]:
                    print("   ", example)
        finally:
            if not os.environ.get("KEEP_STRESS"):
                shutil.rmtree(run.base, ignore_errors=True)
    if options.json:
        print(json.dumps(results))
    else:
        total = {k: sum(r[k] for r in results) for k in ("acknowledged", "lost", "torn")}
        print("all seeds: acknowledged %(acknowledged)d, lost %(lost)d, torn %(torn)d" % total)
    sys.exit(1 if any(r["lost"] or r["torn"] or r["left"] or r["placeholders"] or r["final_status"] for r in results) else 0)


if __name__ == "__main__":
    main()
