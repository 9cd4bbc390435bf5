#!/usr/bin/env python3
"""A live-grant client in plain Python, speaking the broker's wire protocol
(docs/live-grants.md, version 1) without sandboxed-run's binary. Run it
inside a sandbox whose policy takes live grants:

    live-grant.py open-panel [--read-only] [--prompt TEXT] [-o BOOKMARK]
    live-grant.py start-accessing BOOKMARK
    live-grant.py stop-accessing BOOKMARK

It prints what the broker answered and exits with the same codes as
`$SANDBOXED_RUN open-panel` / `start-accessing` / `stop-accessing`."""
import errno
import os
import socket
import struct
import sys

VERSION = 1
OPEN_PANEL, START_ACCESSING, STOP_ACCESSING = 1, 2, 3
READ_ONLY, SEND_BOOKMARK = 1, 2
MAX_PROMPT, MAX_BOOKMARK = 512, 8192
MAX_REPLY = 4 + 8192 + 2 + MAX_BOOKMARK
STATUS = {0: "done", 1: "cancelled", 2: "no picker", 3: "unavailable", 4: "refused", 5: "malformed",
          6: "busy", 7: "not accessing", 11: "replaced", 12: "missing", 13: "revoked", 14: "wrong-app",
          15: "invalid", 16: "covered", 17: "inaccessible"}
EXIT = {1: 1, 2: 2, 3: 3, 4: 4, 6: 5, 7: 6}


def broker():
    fd = os.environ.get("SANDBOXED_RUN_BROKER_FD")
    if fd is None or not fd.isdigit() or int(fd) <= 2:
        sys.exit("live-grant.py: no broker here (SANDBOXED_RUN_BROKER_FD is not set)")
    # A parent that ran this through subprocess without pass_fds closed it.
    keep = ("keep it open in the parent: subprocess.run([...], "
            "pass_fds=[int(os.environ[\"SANDBOXED_RUN_BROKER_FD\"])])")
    try:
        sock = socket.socket(fileno=int(fd))
    except OSError as error:
        what = "is not open" if error.errno == errno.EBADF else "is not the broker's socket (%s)" % error.strerror
        sys.exit("live-grant.py: descriptor %s %s: %s" % (fd, what, keep))
    if sock.type != socket.SOCK_SEQPACKET:
        sys.exit("live-grant.py: descriptor %s is not the broker's socket: %s" % (fd, keep))
    return sock


def ask(sock, operation, flags, payload):
    sock.send(struct.pack("<BBBBH", VERSION, operation, flags, 0, len(payload)) + payload)
    reply = sock.recv(MAX_REPLY)
    if len(reply) < 4 or reply[0] != VERSION:
        sys.exit("live-grant.py: a malformed reply")
    status, length = reply[1], struct.unpack_from("<H", reply, 2)[0]
    text, rest = reply[4:4 + length], reply[4 + length:]
    bookmark = None
    if rest:
        (size,) = struct.unpack_from("<H", rest)
        bookmark = rest[2:2 + size]
        if size == 0 or len(bookmark) != size:
            sys.exit("live-grant.py: a malformed reply")
    return status, text, bookmark


def write_atomically(path, data):
    """The bookmark is the command's to keep: written whole, synced, renamed into place."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    temporary = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temporary, path)
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder_fd)
    finally:
        os.close(folder_fd)


def fail(status, text):
    sys.stderr.write("live-grant.py: %s: %s\n" % (STATUS.get(status, status), text.decode(errors="backslashreplace")))
    sys.exit(status if status >= 11 else EXIT.get(status, 125))


def main(args):
    if not args:
        sys.exit(__doc__)
    command, args = args[0], args[1:]
    sock = broker()
    if command == "open-panel":
        flags, prompt, output = 0, b"", None
        while args:
            option = args.pop(0)
            if option == "--read-only":
                flags |= READ_ONLY
            elif option == "--prompt" and args:
                prompt = args.pop(0).encode()[:MAX_PROMPT]
            elif option == "-o" and args:
                output = args.pop(0)
                flags |= SEND_BOOKMARK
            else:
                sys.exit("live-grant.py: unknown option %s" % option)
        status, text, bookmark = ask(sock, OPEN_PANEL, flags, prompt)
        if status != 0:
            fail(status, text)
        if output is not None:
            write_atomically(output, bookmark)
        print(text.decode(errors="surrogateescape"))
    elif command in ("start-accessing", "stop-accessing") and len(args) == 1:
        with open(args[0], "rb") as file:
            data = file.read(MAX_BOOKMARK + 1)
        if not data or len(data) > MAX_BOOKMARK:
            sys.exit("live-grant.py: %s is not a bookmark" % args[0])
        operation = START_ACCESSING if command == "start-accessing" else STOP_ACCESSING
        status, text, bookmark = ask(sock, operation, 0, data)
        if status != 0:
            fail(status, text)
        if operation == START_ACCESSING:
            print(text.decode(errors="surrogateescape"))
            if bookmark is not None:
                # The folder moved: keep the renewed bookmark.
                write_atomically(args[0], bookmark)
                sys.stderr.write("live-grant.py: the folder moved; %s rewritten\n" % args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
