#!/bin/bash
# folder rename in a staged grant as uid 65534 (userxattr): rename(2) gives EXDEV, mv copies; timed against a plain folder.
# Then the staged upper survives an unmount, an offline change of the lower, and a remount (a later run builds on it).
W=/work/scratch-staging
unshare -m --propagation private bash -c '
W=/work/scratch-staging; mount -o loop,nodiscard $W/state.img $W/mnt/img; S=$W/mnt/img/mv
rm -rf $S; mkdir -p $S/u $S/w $S/m $S/lower $S/plain
for n in 100 1000; do mkdir $S/lower/d$n $S/plain/d$n; for i in $(seq 1 $n); do head -c 2048 /dev/urandom > $S/lower/d$n/f$i; cp $S/lower/d$n/f$i $S/plain/d$n/; done; done
chown -R 65534:65534 $S; sync
setpriv --reuid=65534 --regid=65534 --clear-groups unshare -Ur -m bash -c "
S=$S
t() { local a=\$(date +%s%N); \"\$@\" 2>&1; local b=\$(date +%s%N); echo \"   \$(( (b - a) / 1000 )) us: \$*\"; }
mount -t overlay overlay -o lowerdir=\$S/lower,upperdir=\$S/u,workdir=\$S/w,userxattr \$S/m
for n in 100 1000; do
  python3 -c \"import os,sys
try: os.rename(sys.argv[1], sys.argv[2])
except OSError as e: print(\\\"   rename(2) of a lower folder of %s files:\\\" % sys.argv[3], e)\" \$S/m/d\$n \$S/m/r\$n \$n
  t mv \$S/m/d\$n \$S/m/r\$n; t mv \$S/plain/d\$n \$S/plain/r\$n
done
echo staged-before > \$S/m/r100/f1; umount \$S/m
echo daemon-offline > \$S/lower/new-offline; echo daemon-changed > \$S/lower/d1000/f2
mount -t overlay overlay -o lowerdir=\$S/lower,upperdir=\$S/u,workdir=\$S/w,userxattr \$S/m
echo \"   remount: r100/f1=\$(cat \$S/m/r100/f1) d1000 exists=\$(test -e \$S/m/d1000 && echo yes || echo no) new-offline=\$(cat \$S/m/new-offline) r1000/f2 is the staged copy: \$(cmp -s \$S/m/r1000/f2 \$S/lower/d1000/f2 && echo no || echo yes)\"
"
'
