#!/bin/bash
# seccomp-notify floor: stagebench create/read with every openat sent to a supervisor thread (ADDFD) vs direct, 9 rounds
W=/work/scratch-staging; B=$W/proto/stagebench
unshare -m --propagation private bash -c "
mount -o loop,nodiscard $W/state.img $W/mnt/img; S=$W/mnt/img
echo 'round create_direct create_notify read_direct read_notify'
for r in \$(seq 1 9); do
  a=\$($B create \$S/vaultP 2000 d\$r); b=\$(STAGEBENCH_NOTIFY=1 $B create \$S/vaultP 2000 n\$r)
  c=\$($B read \$S/vaultP 2000); d=\$(STAGEBENCH_NOTIFY=1 $B read \$S/vaultP 2000)
  echo \$r \$a \$b \$c \$d
done
rm -f \$S/vaultP/f*/[dn][0-9]-*.md
"
