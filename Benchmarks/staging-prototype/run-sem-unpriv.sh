#!/bin/bash
# run-sem-unpriv.sh OPTS MODE: uid 65534 in its own user namespace (unshare -Ur -m);
# lower on / (ext4), upper on a separate ext4 image that root mounted beforehand
set -u
S=/work/scratch-staging; OPTS=$1; MODE=${2:-semantics}; R=$S/mnt/state/urun; L=$S/ulower
cat > $S/inner.sh <<IN
set -e
mkdir -p $R/upper $R/work $R/merged
python3 $S/proto/ovlsem.py populate $L
mount -t overlay overlay -o lowerdir=$L,upperdir=$R/upper,workdir=$R/work$OPTS $R/merged || exit 1
grep overlay /proc/self/mounts | sed "s/^/  mount: /"
if [ $MODE = semantics ]; then python3 $S/proto/ovlsem.py semantics $R/merged $R/upper; else python3 $S/proto/ovlsem.py lowerchange $R/merged $L $R/upper; fi
IN
unshare -m --propagation private bash -c "
set -e
mkdir -p $S/mnt/state; mount -o loop $S/state.img $S/mnt/state
rm -rf $R $L; mkdir -p $R $L; chown 65534:65534 $R $L
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all unshare -Ur -m bash $S/inner.sh
"
