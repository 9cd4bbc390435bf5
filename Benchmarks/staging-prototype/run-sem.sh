#!/bin/bash
# run-sem.sh OPTS LABEL : root, init userns; lower on / (ext4), upper on a separate ext4 image
set -u
S=/work/scratch-staging; OPTS=$1; MODE=${2:-semantics}
unshare -m --propagation private bash -c "
set -e
mkdir -p $S/mnt/state
mount -o loop $S/state.img $S/mnt/state
R=$S/mnt/state/run; rm -rf \$R $S/lower; mkdir -p \$R/upper \$R/work \$R/merged $S/lower
python3 $S/proto/ovlsem.py populate $S/lower
mount -t overlay overlay -o lowerdir=$S/lower,upperdir=\$R/upper,workdir=\$R/work$OPTS \$R/merged
grep overlay /proc/self/mounts | sed 's/^/  mount: /'
if [ $MODE = semantics ]; then python3 $S/proto/ovlsem.py semantics \$R/merged \$R/upper; else python3 $S/proto/ovlsem.py lowerchange \$R/merged $S/lower \$R/upper; fi
dmesg 2>/dev/null | tail -3 | sed 's/^/  dmesg: /' || true
"
