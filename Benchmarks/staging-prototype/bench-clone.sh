#!/bin/bash
# design 2b: cost of cloning a vault into a staging copy at launch, and of walking it (stat manifest)
W=/work/scratch-staging
unshare -m --propagation private bash -c '
W=/work/scratch-staging
mkdir -p $W/mnt/img $W/mnt/btr; mount -o loop,nodiscard $W/state.img $W/mnt/img; mount -o loop,nodiscard $W/btrfs.img $W/mnt/btr
mk() { rm -rf "$1"; mkdir -p "$1"; for d in $(seq 1 $(( $2 / 100 ))); do mkdir "$1/f$d"; for i in $(seq 1 100); do head -c 2048 /dev/urandom > "$1/f$d/n$i.md"; done; done; }
t() { sync; local a=$(date +%s%N); "$@" >/dev/null; local b=$(date +%s%N); echo $(( (b - a) / 1000 )); }
for N in 2000 20000; do
  for fs in img btr; do
    V=$W/mnt/$fs/v$N; [ -d $V ] || mk $V $N; sync
    for k in 1 2 3; do
      c=$(t cp -a $V $V.clone); rm -rf $V.clone
      r=$( [ $fs = btr ] && t cp -a --reflink=always $V $V.clone || echo -); rm -rf $V.clone
      w=$(t find $V -printf "%i %s %T@ %C@\n")
      echo "N=$N fs=$fs cp_a_us=$c reflink_us=$r stat_walk_us=$w"
    done
  done
done
'
