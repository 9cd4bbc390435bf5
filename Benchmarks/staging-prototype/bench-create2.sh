#!/bin/bash
# per-file create cost on a mount whose folders are already copied up (second batch), plain vs overlay, with OPTS variants
set -u
W=/work/scratch-staging; B=$W/proto/stagebench
unshare -m --propagation private bash -c "
mount -o loop,nodiscard $W/state.img $W/mnt/img; S=$W/mnt/img
mkdir -p $W/mnt/plain $W/mnt/staged; mount --bind \$S/vaultP $W/mnt/plain
for opts in '' ',volatile' ',xino=off' ',index=on,redirect_dir=on'; do
 for r in 1 2 3 4 5; do
  rm -rf \$S/st/u \$S/st/w; mkdir -p \$S/st/u \$S/st/w
  mount -t overlay overlay -o lowerdir=\$S/vaultL,upperdir=\$S/st/u,workdir=\$S/st/w\$opts $W/mnt/staged
  s1=\$($B create $W/mnt/staged 2000 a); p1=\$($B create $W/mnt/plain 2000 a); sync
  s2=\$($B create $W/mnt/staged 2000 b); p2=\$($B create $W/mnt/plain 2000 b); sync
  umount $W/mnt/staged; rm -f \$S/vaultP/f*/[ab]-*.md; sync
  echo \"opts='\$opts' first: staged \$s1 plain \$p1 ratio \$(echo \"scale=2; \$s1/\$p1\" | bc)  second: staged \$s2 plain \$p2 ratio \$(echo \"scale=2; \$s2/\$p2\" | bc)\"
 done
done
"
