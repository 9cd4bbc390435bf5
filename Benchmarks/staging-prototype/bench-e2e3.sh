#!/bin/bash
# one interleaved run, three grants: plain bind of the folder, bind of a clone (stageclone), overlay over the folder
# python3 creating 2,000 files and reading the 2,000 unmodified ones, each under Landlock with the rule on the mount used
W=/work/scratch-staging
unshare -m --propagation private bash -c '
W=/work/scratch-staging; P=$W/proto; mount -o loop,nodiscard $W/state.img $W/mnt/img; S=$W/mnt/img
rm -rf $S/e3; mkdir -p $S/e3/p $S/e3/c $S/e3/m $S/e3/u $S/e3/w
cp -a $S/vaultL $S/e3/host; $P/stageclone $S/e3/host $S/e3/clone $S/e3/man 2>/dev/null
cp -a $S/vaultL $S/e3/lower
mount --bind $S/e3/host $S/e3/p; mount --bind $S/e3/clone $S/e3/c
mount -t overlay overlay -o lowerdir=$S/e3/lower,upperdir=$S/e3/u,workdir=$S/e3/w $S/e3/m; sync
echo "# create 2,000 files: plain, clone, overlay (12 rounds)"
$P/interleaved 12 2 "$P/llexec $S/e3/p -- /usr/bin/python3 $P/create.py $S/e3/p" "$P/llexec $S/e3/c -- /usr/bin/python3 $P/create.py $S/e3/c" "$P/llexec $S/e3/m -- /usr/bin/python3 $P/create.py $S/e3/m"
echo "# read the 2,000 unmodified files: plain, clone, overlay (30 rounds)"
$P/interleaved 30 3 "$P/llexec $S/e3/p -- /usr/bin/python3 $P/read.py $S/e3/p" "$P/llexec $S/e3/c -- /usr/bin/python3 $P/read.py $S/e3/c" "$P/llexec $S/e3/m -- /usr/bin/python3 $P/read.py $S/e3/m"
umount $S/e3/p $S/e3/c $S/e3/m; rm -rf $S/e3
'
