"""A memo writer: appends one line to today's note in a vault.

It is the kind of small, untrusted tool sandboxed-run confines. It finds its
folder the sandboxed way: a granted folder named VAULT when there is one
(SANDBOX_GRANT_VAULT), otherwise its own container's Documents. It never
stores an absolute path.

A sync daemon may rewrite the note at the same moment, or evict it to a
placeholder. So every line goes through `sandboxed-run append` (the launcher
puts its own binary in the sandbox as $SANDBOXED_RUN): coordinated with the
daemon, whole or not at all, and never into a file that was just replaced.
When the note is only a placeholder, the memo writer does what the motivating
story chose: it asks for the download, keeps the line in its own container,
and says so; the line lands at the next launch.

Run it confined, feeding the script on stdin (the sandbox cannot read this
repository, which is the point):
    sandboxed-run run --app com.example.memo -- /usr/bin/python3 - "Buy milk" < Examples/memo-writer.py
"""
import datetime
import hashlib
import os
import subprocess
import sys

TRY_LATER = 75  # sandboxed-run append: locked too long, or only a placeholder


def vault() -> str:
    granted = os.environ.get("SANDBOX_GRANT_VAULT")
    if granted:
        return granted
    return os.path.join(os.environ["HOME"], "Documents")


def pending_file() -> str:
    # Our own container: no one else's to lose, and it survives until next launch.
    folder = os.path.join(os.environ["HOME"], "Library", "Pending")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, "lines.txt")


def append(note: str, line: str) -> int:
    tool = os.environ.get("SANDBOXED_RUN", "sandboxed-run")
    # --download 0: if the note is evicted, ask for it, and do not wait.
    return subprocess.run([tool, "append", "--download", "0", "--", note, line], stderr=subprocess.DEVNULL).returncode


def stem(name: bytes) -> bytes:
    # Coordination protocol version 2 (Sources/Coordination/PROTOCOL.md, "Names"):
    # the prefix of the files kept beside NAME; hashed when NAME is long.
    return b"." + name if len(name) <= 234 else b".sr2-" + hashlib.sha256(name).hexdigest()[:32].encode()


def placeholder(note: str) -> bool:
    folder, name = os.path.split(os.fsencode(note))
    return not os.path.exists(note) and os.path.lexists(os.path.join(folder, stem(name) + b".icloud"))


def durably_write(path: str, text: str, mode: str):
    # A line the user was told is kept must survive a crash too: flush it, and the folder.
    with open(path, mode, encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def flush_pending() -> int:
    """Lines queued at earlier launches, oldest first; returns how many landed."""
    path = pending_file()
    if not os.path.exists(path):
        return 0
    entries = [entry.split("\t", 1) for entry in open(path, encoding="utf-8").read().splitlines() if "\t" in entry]
    landed, kept = 0, []
    for note, line in entries:
        if not kept and append(os.path.join(vault(), note), line) == 0:
            landed += 1
        else:
            kept.append(note + "\t" + line)  # keep the order: nothing jumps the queue
    durably_write(path + ".new", "".join(entry + "\n" for entry in kept), "w")
    os.replace(path + ".new", path)
    durably_write(path, "", "a")  # the rename, flushed
    return landed


def memo(text: str) -> str:
    folder = os.path.join(vault(), "daily")
    os.makedirs(folder, exist_ok=True)
    name = os.path.join("daily", datetime.date.today().isoformat() + ".md")
    note = os.path.join(vault(), name)
    line = "- " + datetime.datetime.now().strftime("%H:%M") + " " + " ".join(text.split())
    status = append(note, line)
    if status == 0:
        return "appended to " + name
    if status == TRY_LATER and placeholder(note):
        durably_write(pending_file(), name + "\t" + line + "\n", "a")
        return name + " is in the cloud, not on this device: asked for it, and kept the line; it lands at the next launch"
    sys.exit("could not append to %s (sandboxed-run append exited %d)" % (name, status))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: memo-writer.py TEXT...")
    earlier = flush_pending()
    if earlier:
        print("%d queued line(s) from earlier landed" % earlier)
    print(memo(" ".join(sys.argv[1:])), "in", "the granted vault" if os.environ.get("SANDBOX_GRANT_VAULT") else "the container's Documents")
