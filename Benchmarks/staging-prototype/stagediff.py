#!/usr/bin/env python3
# stagediff.py HOST CLONE MANIFEST: what the command changed in CLONE, and which of those paths
# changed on HOST since the clone (conflicts). Renames are found by the clone's inode number.
import os, sys, stat, fcntl, struct
FS_IOC_GETVERSION = 0x80087601
def ident(p, st):  # inode number + generation: a deleted file's inode number is reused at once
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try: g = struct.unpack('I', fcntl.ioctl(fd, FS_IOC_GETVERSION, b'\0' * 8)[:4])[0]
    finally: os.close(fd)
    return '%d:%d' % (st.st_ino, g)
host, clone, manp = sys.argv[1:4]
man = {}; byino = {}
for line in open(manp, encoding="ascii"):
    k, hdev, hino, size, mt, ct, cino, cct, rel = line.rstrip("\n").split("\t")
    man[rel] = (k, int(hdev), int(hino), int(size), int(mt), int(ct), cino, int(cct)); byino[cino] = rel
seen = set(); out = []
for dp, dns, fns in os.walk(clone):
    for n in dns + fns:
        p = os.path.join(dp, n); rel = os.path.relpath(p, clone); st = os.lstat(p)
        relm = rel  # (a real tool escapes names the same way as the manifest)
        old = byino.get(ident(p, st))
        if old is not None and old != relm: out.append(("renamed", relm, old)); seen.add(old); continue
        if old is None: out.append(("added", relm, None)); continue
        seen.add(old); m = man[old]
        if stat.S_ISREG(st.st_mode) and (st.st_ctime_ns != m[7] or st.st_size != m[3]): out.append(("modified", relm, None))
        elif stat.S_ISREG(st.st_mode) and st.st_ctime_ns != m[7]: out.append(("metadata-changed", relm, None))
for rel in man:
    if rel not in seen: out.append(("deleted", rel, None))
conflicts = 0
for ch, rel, frm in out:
    base = frm or rel
    if base in man:
        m = man[base]
        try:
            h = os.lstat(os.path.join(host, base))
            if (h.st_dev, h.st_ino, h.st_size, h.st_mtime_ns, h.st_ctime_ns) != m[1:6] and m[0] == "f": conflicts += 1
        except FileNotFoundError: conflicts += 1
print("changes %d (%s), changed outside since staged: %d" % (len(out), ", ".join("%s %d" % (c, sum(1 for o in out if o[0] == c)) for c in sorted(set(o[0] for o in out))), conflicts))
