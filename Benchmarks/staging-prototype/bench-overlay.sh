#!/bin/bash
# bench-overlay.sh ROUNDS [UPPERFS_DIR] : create-2000 and read-2000, plain bind mount vs overlay (fresh per round), interleaved.
# Runs as root in its own mount namespace (call it under unshare -m --propagation private).
set -eu
S=${S:-/work/scratch-staging}; B=/work/scratch-staging/proto/stagebench; ROUNDS=${1:-15}; UP=${2:-$S/state-same}; OPTS=${OPTS:-}
make_vault() { rm -rf "$1"; mkdir -p "$1"; for d in $(seq -w 1 20); do mkdir "$1/f$d"; for i in $(seq 1 100); do head -c 2048 /dev/urandom > "$1/f$d/n$i.md"; done; done; }
[ -d $S/vaultP ] || make_vault $S/vaultP
[ -d $S/vaultL ] || { make_vault $S/vaultL; }
mkdir -p $S/mnt/plain $S/mnt/staged $UP
mount --bind $S/vaultP $S/mnt/plain
mount_overlay() { rm -rf $UP/u $UP/w; mkdir -p $UP/u $UP/w; mount -t overlay overlay -o lowerdir=$S/vaultL,upperdir=$UP/u,workdir=$UP/w$OPTS $S/mnt/staged; }
echo "round plain_create staged_create plain_read staged_read_first staged_read_second"
for r in $(seq 1 $ROUNDS); do
  mount_overlay
  if (( r % 2 )); then pc=$($B create $S/mnt/plain 2000 r$r); sc=$($B create $S/mnt/staged 2000 r$r)
  else sc=$($B create $S/mnt/staged 2000 r$r); pc=$($B create $S/mnt/plain 2000 r$r); fi
  umount $S/mnt/staged; mount_overlay
  if (( r % 2 )); then pr=$($B read $S/mnt/plain 2000); s1=$($B read $S/mnt/staged 2000)
  else s1=$($B read $S/mnt/staged 2000); pr=$($B read $S/mnt/plain 2000); fi
  s2=$($B read $S/mnt/staged 2000)
  umount $S/mnt/staged
  rm -f $S/vaultP/f*/r$r-*.md
  sync; echo "$r $pc $sc $pr $s1 $s2"
done
