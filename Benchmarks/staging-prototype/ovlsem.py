#!/usr/bin/env python3
# Overlay semantics probe: ovlsem.py populate LOWER | semantics MERGED UPPER | lowerchange MERGED LOWER UPPER
import os, sys, errno, stat, subprocess, ctypes
libc = ctypes.CDLL(None, use_errno=True)
def e(fn, *a):
    try:
        r = fn(*a); return "ok" if r is None else ("ok:%r" % (r,))
    except OSError as x:
        return errno.errorcode.get(x.errno, str(x.errno))
def renameat2(a, b, flags):
    r = libc.renameat2(-100, a.encode(), -100, b.encode(), flags)
    if r != 0: raise OSError(ctypes.get_errno(), "renameat2")
def wr(p, s, mode="w"):
    with open(p, mode) as f: f.write(s)
def rd(p):
    with open(p) as f: return f.read()
def describe(root):
    out = []
    for dp, dns, fns in os.walk(root):
        for n in sorted(dns + fns):
            p = os.path.join(dp, n); st = os.lstat(p)
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "chr %d/%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISCHR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
            try: xs = {x: os.getxattr(p, x, follow_symlinks=False) for x in os.listxattr(p, follow_symlinks=False)}
            except OSError as x: xs = "listxattr:" + errno.errorcode[x.errno]
            out.append("  %-22s %-9s mode=%o size=%d blocks=%d nlink=%d xattrs=%s" % (os.path.relpath(p, root), kind, stat.S_IMODE(st.st_mode), st.st_size, st.st_blocks, st.st_nlink, xs))
    return "\n".join(out)
cmd = sys.argv[1]
if cmd == "populate":
    L = sys.argv[2]
    for d in ["d/sub", "e", "k"]: os.makedirs(os.path.join(L, d), exist_ok=True)
    for n in ["d/a", "d/b", "d/sub/c", "e/x", "g", "k/y"]: wr(os.path.join(L, n), n + "\n")
    with open(os.path.join(L, "big"), "wb") as f: f.write(os.urandom(50 << 20))
    wr(os.path.join(L, "h1"), "hard\n"); os.link(os.path.join(L, "h1"), os.path.join(L, "h2"))
    for n in ["x", "y", "z0", "w"]: wr(os.path.join(L, "k", n), "old " + n + "\n")
elif cmd == "semantics":
    M, U = sys.argv[2], sys.argv[3]
    j = lambda n: os.path.join(M, n)
    print("rename(2) lower dir d -> d2:", e(os.rename, j("d"), j("d2")))
    print("renameat2 NOREPLACE d -> d4:", e(renameat2, j("d"), j("d4"), 1))
    print("renameat2 EXCHANGE d <-> e:", e(renameat2, j("d"), j("e"), 2))
    print("rename lower dir d/sub -> d/sub2 (same parent):", e(os.rename, j("d/sub"), j("d/sub2")))
    r = subprocess.run(["mv", j("d"), j("d3")], capture_output=True, text=True)
    print("mv d d3: rc=%d %s; d3/sub/c=%r; d exists=%s" % (r.returncode, r.stderr.strip(), e(rd, j("d3/sub/c")), os.path.exists(j("d"))))
    print("rename lower file g -> g2:", e(os.rename, j("g"), j("g2")))
    os.mkdir(j("n")); wr(j("n/f"), "new\n")
    print("rename new (upper-only) dir n -> n2:", e(os.rename, j("n"), j("n2")))
    print("rm -r e; mkdir e:", subprocess.run(["rm", "-r", j("e")]).returncode, e(os.mkdir, j("e")), "ls e:", os.listdir(j("e")))
    print("unlink k/w:", e(os.unlink, j("k/w")))
    print("chmod big 600:", e(os.chmod, j("big"), 0o600))
    print("truncate h1 -> write:", e(wr, j("h1"), "changed\n"), "h2 reads", repr(rd(j("h2"))))
    print("mknod 0/0 in merged:", e(os.mknod, j("wh"), stat.S_IFCHR | 0o600, 0))
    for nm in ["trusted.overlay.opaque", "user.overlay.opaque", "user.overlay.whiteout", "user.overlay.redirect", "trusted.overlay.redirect"]:
        print("setxattr %s on merged k:" % nm, e(os.setxattr, j("k"), nm, b"y"))
    print("listxattr merged e:", e(os.listxattr, j("e")))
    os.sync()
    print("upper tree:"); print(describe(U))
elif cmd == "lowerchange":
    M, L, U = sys.argv[2], sys.argv[3], sys.argv[4]
    j = lambda n: os.path.join(M, n); l = lambda n: os.path.join(L, n)
    # warm the overlay's caches as a running command would
    print("before: ls k", sorted(os.listdir(j("k"))), {n: rd(j("k/" + n)).strip() for n in ["x", "y", "w", "z0"]})
    fx = open(j("k/x"))  # a file the command holds open
    wr(l("k/x"), "NEW x in place\n", "r+")             # daemon writes in place
    wr(l("k/y.tmp"), "NEW y replaced\n"); os.rename(l("k/y.tmp"), l("k/y"))  # daemon replaces atomically
    wr(l("k/z"), "NEW z created\n")                     # daemon creates
    os.unlink(l("k/w"))                                 # daemon deletes
    wr(l("k/z0"), "NEW z0 (never looked up)\n", "r+")
    print("held fd on x reads:", repr(fx.read()))
    print("after: ls k", sorted(os.listdir(j("k"))))
    for n in ["x", "y", "z", "w", "z0"]:
        print("  k/%s: stat=%s read=%s" % (n, e(lambda p: os.stat(p).st_ino, j("k/" + n)), e(lambda p: rd(p).strip(), j("k/" + n))))
    # copy-up after the lower changed: which bytes are staged?
    print("append to merged k/y:", e(wr, j("k/y"), "+cmd\n", "a"), "-> merged reads", repr(rd(j("k/y"))))
    print("lower k/y still", repr(rd(l("k/y"))))
    os.mkdir(l("k/newdir")); wr(l("k/newdir/q"), "q\n")
    print("daemon mkdir k/newdir: merged stat", e(lambda p: os.listdir(p), j("k/newdir")))
    os.rename(l("d"), l("dmoved"))
    print("daemon renames lower d -> dmoved: merged ls /", sorted(os.listdir(M)), "read d/a:", e(rd, j("d/a")), "read dmoved/a:", e(rd, j("dmoved/a")))
    print("upper tree:"); print(describe(U))
