#!/usr/bin/env python3
# bubblewrap's arguments for the view sandboxed-run's private view builds from
# a policy: each of its org.sandboxed-run.system-paths.* bound at its own path
# (read-only, or writable for read-write), a link on the host a link with the
# host's text (and its target bound when nothing else holds it), plus the
# folders given with --bind (the container, a grant), and the same kind of
# namespaces, /dev, /proc and /tmp as bubblewrap's "isolated" line. Paths the
# host lacks are left out, as the launcher leaves them out; /dev/* nodes are
# bubblewrap's own --dev /dev (the launcher binds the same six). One word a
# line (for mapfile), ending with the command's place: the caller appends it.
#   Benchmarks/bwrap-view.py POLICY.plist [--bind DIR]...
import os
import plistlib
import sys

policy, binds = sys.argv[1], []
rest = sys.argv[2:]
while rest:
    if rest[0] != "--bind" or len(rest) < 2:
        sys.exit("usage: bwrap-view.py POLICY.plist [--bind DIR]...")
    binds.append(rest[1])
    rest = rest[2:]
with open(policy, "rb") as file:
    plist = plistlib.load(file)

entries = {}  # destination -> (kind, source)
for access, kind in (("read-execute", "--ro-bind"), ("read-only", "--ro-bind"), ("read-write", "--bind")):
    for path in plist.get(f"org.sandboxed-run.system-paths.{access}", []):
        if path.startswith("/dev/") or not os.path.lexists(path):
            continue
        if os.path.realpath(os.path.dirname(path)) != os.path.dirname(path):
            sys.exit(f"bwrap-view.py: {path} has a link above it; this generator only handles a link as the last name")
        if os.path.islink(path):
            entries[path] = ("--symlink", os.readlink(path))
        else:
            entries.setdefault(path, (kind, path))
            if kind == "--bind":
                entries[path] = (kind, path)
for path in binds:
    entries[path] = ("--bind", path)


def held(path):
    return any(kind != "--symlink" and (path == other or path.startswith(other + "/")) for other, (kind, _) in entries.items())


# A link's target, when no bind holds it (the launcher binds it at its own name too).
for path, (kind, text) in list(entries.items()):
    if kind == "--symlink":
        real = os.path.realpath(path)
        if os.path.exists(real) and not held(real):
            entries[real] = ("--ro-bind", real)

# A read-only path inside a read-only bind is there already (the launcher only checks it).
for path, (kind, _) in list(entries.items()):
    parents = [other for other, (k, _) in entries.items() if other != path and path.startswith(other + "/") and k != "--symlink"]
    if kind == "--ro-bind" and parents:
        del entries[path]

words = ["bwrap", "--unshare-all", "--new-session", "--die-with-parent", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
for path in sorted(entries, key=lambda p: p.split("/")):  # parents first
    kind, source = entries[path]
    words += [kind, source, path]
print("\n".join(words))
