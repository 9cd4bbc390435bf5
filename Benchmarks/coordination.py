"""The motivating story, counted: writers append timestamped lines to today's
note while a sync daemon (sandboxed-run sync-simulator) rewrites the whole
file with remote edits. Naive writers (seek to the end, write) against
coordinated ones (the protocol of Sources/Coordination/PROTOCOL.md, version 2,
its own Python writer: in the same language and process model), the same
rounds, the same edits; and coordinated without the flushes (what version 1
did), to show what "success means durable" costs.

Usage: python3 coordination.py SANDBOXED_RUN [ROUNDS] [EDIT_RATE]
"""
import os, re, signal, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
_text = open(os.path.join(HERE, "..", "Sources", "Coordination", "PROTOCOL.md"), encoding="utf-8").read()
_start = _text.index("```python\n") + len("```python\n")
exec(_text[_start : _text.index("\n```", _start)])  # locked(), recover(), append(): the protocol's writer

binary = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
edit_rate = sys.argv[3] if len(sys.argv) > 3 else "200"
writers = 2
LINE = re.compile(r"^- w(\d) (\d+) at \d+\.\d+$")


def naive_append(path, line):
    # What the memo writer did before: find the end, write there.
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.write(line)


def unflushed_append(folder, name, line):
    # The protocol's lock and re-validation, without fsync: what version 1 did.
    fd = locked(folder, name, write=True, create=True)
    try:
        recover(folder, name, fd)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)  # short lines within a page: whole or absent
    finally:
        os.close(fd)


def writer(mode, folder_path, name, index, count):
    folder = os.open(folder_path, os.O_RDONLY | os.O_DIRECTORY)
    path = os.path.join(folder_path, name)
    for n in range(count):
        line = ("- w%d %d at %.6f\n" % (index, n, time.time())).encode()
        if mode == "naive":
            naive_append(path, line)
        elif mode == "unflushed":
            unflushed_append(folder, name.encode(), line)
        else:
            append(folder, name.encode(), line[:-1])
    os._exit(0)


def experiment(mode):
    folder = tempfile.mkdtemp(prefix="coordination-")
    note = os.path.join(folder, "daily.md")
    open(note, "w").close()
    daemon = subprocess.Popen([binary, "sync-simulator", folder, "--edit-rate", edit_rate, "--seed", "1"],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    started = time.monotonic()
    children = []
    for index in range(writers):
        pid = os.fork()
        if pid == 0:
            writer(mode, folder, "daily.md", index, rounds // writers)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    elapsed = time.monotonic() - started
    daemon.send_signal(signal.SIGTERM)
    counts = daemon.communicate()[0].strip()
    seen, corrupted = set(), 0
    for raw in open(note, "rb").read().split(b"\n"):
        text = raw.decode("utf-8", "replace")
        if not text or text.startswith("remote edit "):
            continue
        match = LINE.match(text)
        if match:
            seen.add((int(match.group(1)), int(match.group(2))))
        else:
            corrupted += 1
    lost = writers * (rounds // writers) - len(seen)
    subprocess.run(["rm", "-rf", folder])
    return lost, corrupted, rounds / elapsed, counts


print("%d rounds (appended lines) by %d writer processes, against remote edits at %s/s (whole file rewritten, renamed over)" % (rounds, writers, edit_rate))
naive = experiment("naive")
unflushed = experiment("unflushed")
coordinated = experiment("coordinated")
for label, (lost, corrupted, rate, counts) in (("naive", naive), ("unflushed", unflushed), ("coordinated", coordinated)):
    print("%-12s lost %5d   corrupted %5d   %8.0f appends/s   daemon: %s" % (label, lost, corrupted, rate, counts))
print("coordinated throughput / naive: %.2f; coordinated without the flushes / naive: %.2f; the flushes cost %.2f ms per append"
      % (coordinated[2] / naive[2], unflushed[2] / naive[2], 1000 / coordinated[2] - 1000 / unflushed[2]))
