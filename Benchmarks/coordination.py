"""The motivating story, counted: writers append timestamped lines to today's
note while a sync daemon (sandboxed-run sync-simulator) rewrites the whole
file with remote edits. Naive writers (seek to the end, write) against
coordinated ones (the protocol of Sources/Coordination/PROTOCOL.md, in the
same language and process model), the same rounds, the same edits.

Usage: python3 coordination.py SANDBOXED_RUN [ROUNDS] [EDIT_RATE]
"""
import fcntl, os, re, signal, stat, struct, subprocess, sys, tempfile, time

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


def locked(folder, name):
    while True:
        fd = os.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=folder)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        request = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
        for _ in range(100):  # a holder keeps it for microseconds: try a little before sleeping
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request); break
            except OSError:
                os.sched_yield()
        else:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, request)
        held, named = os.fstat(fd), os.stat(name, dir_fd=folder, follow_symlinks=False)
        if held.st_nlink and (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino):
            return fd
        os.close(fd)


def coordinated_append(folder, name, line):
    fd = locked(folder, name)
    try:
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
        else:
            coordinated_append(folder, name, line)
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
coordinated = experiment("coordinated")
for label, (lost, corrupted, rate, counts) in (("naive", naive), ("coordinated", coordinated)):
    print("%-12s lost %5d   corrupted %5d   %8.0f appends/s   daemon: %s" % (label, lost, corrupted, rate, counts))
print("coordinated throughput / naive: %.2f" % (coordinated[2] / naive[2]))
