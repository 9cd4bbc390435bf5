#!/bin/bash
# accept of 2,000 changed files: apply perfile / batched against cp -a + sync, on the loop ext4 image and on the root ext4 (vda)
W=/work/scratch-staging; P=$W/proto
unshare -m --propagation private bash -c '
W=/work/scratch-staging; P=$W/proto
mount -o loop,nodiscard $W/state.img $W/mnt/img
t() { local a=$(date +%s%N); eval "$1" >/dev/null; local b=$(date +%s%N); echo $(( (b - a) / 1000000 )); }
for base in $W/mnt/img/apply $W/apply-vda; do
  rm -rf $base; mkdir -p $base; cp -a $W/mnt/img/vaultL $base/pristine; cp -a $base/pristine $base/staged
  for f in $base/staged/f*/*.md; do head -c 2100 /dev/urandom > $f; done
  for r in 1 2 3 4 5; do
    for m in cp cpf batched $( [ $r = 1 ] && echo perfile ); do
      rm -rf $base/target; cp -a $base/pristine $base/target; sync
      case $m in
        cp) ms=$(t "cp -a $base/staged/. $base/target/ && sync") ;;
        cpf) ms=$(t "cp -a $base/staged/. $base/target/ && sync -f $base/target") ;;
        *) ms=$(t "$P/apply $m $base/staged $base/target") ;;
      esac
      cmp -s $base/staged/f07/n42.md $base/target/f07/n42.md || echo "MISMATCH $m"
      echo "$(basename $(dirname $base))/$(basename $base) round $r $m $ms ms"
    done
  done
done
rm -rf $W/apply-vda
'
