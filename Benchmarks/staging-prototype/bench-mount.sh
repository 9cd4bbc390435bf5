#!/bin/bash
# root, then uid 65534 in a user namespace: bind vs overlay setup, 200 each, alternating 3 times
W=/work/scratch-staging; P=$W/proto
unshare -m --propagation private bash -c "
mkdir -p $W/mnt/img; mount -o loop,nodiscard $W/state.img $W/mnt/img; export S=$W/mnt/img
mkdir -p \$S/mb/u \$S/mb/w \$S/mb/t
echo '# root, init user namespace (lower: 2,000-file vault; upper on the same ext4 image)'
for k in 1 2 3; do $P/mountbench bind \$S/vaultL \$S/mb/u \$S/mb/w \$S/mb/t 200; $P/mountbench overlay \$S/vaultL \$S/mb/u \$S/mb/w \$S/mb/t 200; done
rm -rf \$S/mb; mkdir -p \$S/mb/u \$S/mb/w \$S/mb/t \$S/uvault; cp -a \$S/vaultL/. \$S/uvault/; chown -R 65534:65534 \$S/mb \$S/uvault
echo '# uid 65534 in its own user namespace (userxattr)'
setpriv --reuid=65534 --regid=65534 --clear-groups unshare -Ur -m bash -c 'for k in 1 2 3; do $P/mountbench bind \$S/uvault \$S/mb/u \$S/mb/w \$S/mb/t 200; $P/mountbench overlay-userxattr \$S/uvault \$S/mb/u \$S/mb/w \$S/mb/t 200; done'
"
