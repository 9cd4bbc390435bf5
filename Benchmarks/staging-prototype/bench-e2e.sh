#!/bin/bash
# end to end, as a user would: python3 creating 2,000 files / reading the 2,000-file vault, plain bind vs overlay, interleaved runs
W=/work/scratch-staging
unshare -m --propagation private bash -c '
W=/work/scratch-staging; P=$W/proto; mount -o loop,nodiscard $W/state.img $W/mnt/img; S=$W/mnt/img
fresh() { umount $S/e2e/p $S/e2e/m 2>/dev/null; rm -rf $S/e2e; mkdir -p $S/e2e/u $S/e2e/w $S/e2e/m $S/e2e/p
  cp -a $S/vaultL $S/e2e/vaultP; mount --bind $S/e2e/vaultP $S/e2e/p
  mount -t overlay overlay -o lowerdir=$S/vaultL,upperdir=$S/e2e/u,workdir=$S/e2e/w $S/e2e/m; sync; }
fresh; echo "# create 2,000 files (python3), 12 rounds"
$P/interleaved 12 2 "/usr/bin/python3 $P/create.py $S/e2e/p" "/usr/bin/python3 $P/create.py $S/e2e/m"
fresh; echo "# create 2,000 files under Landlock (rule on the bind / on the merged mount), 12 rounds"
$P/interleaved 12 2 "$P/llexec $S/e2e/p -- /usr/bin/python3 $P/create.py $S/e2e/p" "$P/llexec $S/e2e/m -- /usr/bin/python3 $P/create.py $S/e2e/m"
umount $S/e2e/p $S/e2e/m; rm -rf $S/e2e
mkdir -p $S/e2e/pl $S/e2e/m2 $S/e2e/u2 $S/e2e/w2; mount --bind $S/vaultL $S/e2e/pl
mount -t overlay overlay -o lowerdir=$S/vaultL,upperdir=$S/e2e/u2,workdir=$S/e2e/w2 $S/e2e/m2
echo "# read the 2,000 unmodified files (python3; bind of the lower itself vs the overlay over it), 30 rounds"
$P/interleaved 30 3 "/usr/bin/python3 $P/read.py $S/e2e/pl" "/usr/bin/python3 $P/read.py $S/e2e/m2"
echo "# the same under Landlock"
$P/interleaved 30 3 "$P/llexec $S/e2e/pl -- /usr/bin/python3 $P/read.py $S/e2e/pl" "$P/llexec $S/e2e/m2 -- /usr/bin/python3 $P/read.py $S/e2e/m2"
umount $S/e2e/pl $S/e2e/m2; rm -rf $S/e2e
'
