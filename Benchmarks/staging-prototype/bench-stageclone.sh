#!/bin/bash
# clone design: launch-time clone (stageclone: FICLONE or copy_file_range + manifest) vs cp -a, on ext4 and btrfs,
# 2,000 and 20,000 files; then a command's changes and a daemon's, and the end-of-run diff
W=/work/scratch-staging
unshare -m --propagation private bash -c '
W=/work/scratch-staging; P=$W/proto
mkdir -p $W/mnt/img $W/mnt/btr; mount -o loop,nodiscard $W/state.img $W/mnt/img; mount -o loop,nodiscard $W/btrfs.img $W/mnt/btr
find $W/mnt/img/vaultP -name "[dn][0-9]-*.md" -delete
t() { sync; local a=$(date +%s%N); "$@" >/dev/null 2>&1; local b=$(date +%s%N); echo $(( (b - a) / 1000 )); }
for N in ${NLIST:-2000 20000}; do for fs in ${FSLIST:-img btr}; do
  V=$W/mnt/$fs/v$N; [ -d $V ] || python3 -c "import os,sys
for d in range(1,int(sys.argv[2])//100+1):
 os.makedirs(\"%s/f%d\"%(sys.argv[1],d))
 for i in range(1,101): open(\"%s/f%d/n%d.md\"%(sys.argv[1],d,i),\"wb\").write(os.urandom(2048))" $V $N
  for k in 1 2 3 4 5; do
    c=$(t cp -a $V $V.c); rm -rf $V.c
    s=$(t $P/stageclone $V $V.s $V.man); [ $k = 1 ] && $P/stageclone $V $V.s2 /dev/null 2>&1 | sed "s/^/  /"; rm -rf $V.s $V.s2
    echo "N=$N fs=$fs cp_a_us=$c stageclone_us=$s"
  done
done; done
echo "# a run: clone, the command changes things in the clone, a daemon changes 5 host files, diff"
V=$W/mnt/img/v2000; rm -rf $V.s; $P/stageclone $V $V.s $V.man 2>/dev/null
for i in $(seq 1 100); do echo cmd >> $V.s/f3/n$i.md; done; mv $V.s/f5 $V.s/f5-renamed; rm $V.s/f7/n1.md $V.s/f7/n2.md
mkdir $V.s/new; for i in $(seq 1 50); do echo n > $V.s/new/a$i.md; done; chmod 600 $V.s/f9/n9.md
for i in 1 2 3 4 5; do echo daemon >> $V/f3/n$i.md; done
for k in 1 2 3; do a=$(date +%s%N); python3 $P/stagediff.py $V $V.s $V.man; b=$(date +%s%N); echo "  diff $(( (b - a) / 1000 )) us"; done
for i in 1 2 3 4 5; do truncate -s -7 $V/f3/n$i.md; done; rm -rf $V.s $V.man
'
