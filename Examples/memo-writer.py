"""A memo writer: appends one line to today's note in a vault.

It is the kind of small, untrusted tool sandboxed-run confines. It finds its
folder the sandboxed way: a granted folder named VAULT when there is one
(SANDBOX_GRANT_VAULT), otherwise its own container's Documents. It never
stores an absolute path.

The note may be touched by a sync daemon at the same time, so every line is
written with one O_APPEND write under an exclusive lock: no line is ever torn
or interleaved with another writer's.

Run it confined, feeding the script on stdin (the sandbox cannot read this
repository, which is the point):
    sandboxed-run run --app com.example.memo -- /usr/bin/python3 - "Buy milk" < Examples/memo-writer.py
"""
import datetime
import fcntl
import os
import sys


def vault() -> str:
    granted = os.environ.get("SANDBOX_GRANT_VAULT")
    if granted:
        return granted
    return os.path.join(os.environ["HOME"], "Documents")


def append_memo(text: str) -> str:
    folder = os.path.join(vault(), "daily")
    os.makedirs(folder, exist_ok=True)
    note = os.path.join(folder, datetime.date.today().isoformat() + ".md")
    line = "- " + datetime.datetime.now().strftime("%H:%M") + " " + " ".join(text.split()) + "\n"
    fd = os.open(note, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = line.encode()
        written = os.write(fd, data)
        if written != len(data):
            raise OSError("short write to " + note)
        os.fsync(fd)
    finally:
        os.close(fd)
    return note


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: memo-writer.py TEXT...")
    note = append_memo(" ".join(sys.argv[1:]))
    print("appended to", os.path.relpath(note, vault()), "in", "the granted vault" if os.environ.get("SANDBOX_GRANT_VAULT") else "the container's Documents")
