#!/bin/bash
# root, redirect_dir=on: each rename form on a fresh lower folder (lower on /, upper on tmpfs)
S=/work/scratch-staging
unshare -m --propagation private bash -c '
S=/work/scratch-staging; T=$S/mnt/rr; mkdir -p $T; mount -t tmpfs tmpfs $T; mkdir -p $T/u $T/w $T/m
rm -rf $S/rrlower; mkdir -p $S/rrlower/{a,b,c,e}/sub; for d in a b c e; do echo $d > $S/rrlower/$d/f; done
mount -t overlay overlay -o lowerdir=$S/rrlower,upperdir=$T/u,workdir=$T/w,redirect_dir=on $T/m
python3 - $T/m <<PY
import os, sys, ctypes, errno
libc = ctypes.CDLL(None, use_errno=True); M = sys.argv[1]
def r2(a, b, fl):
    if libc.renameat2(-100, (M+a).encode(), -100, (M+b).encode(), fl): return errno.errorcode[ctypes.get_errno()]
    return "ok"
print("renameat2 NOREPLACE /a -> /a2:", r2("/a", "/a2", 1), "| a2/f:", open(M+"/a2/f").read().strip())
print("renameat2 EXCHANGE /b <-> /c:", r2("/b", "/c", 2), "| b/f:", open(M+"/b/f").read().strip())
print("rename /e/sub -> /e/sub2 (same parent):", r2("/e/sub", "/e/sub2", 0))
PY
echo "upper xattrs:"; getfattr -R -d -m - $T/u 2>/dev/null | grep -v "^$" | sed "s/^/  /"
'
