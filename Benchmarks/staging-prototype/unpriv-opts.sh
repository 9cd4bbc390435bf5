#!/bin/bash
# which overlay options uid 65534 may use in its own user namespace (lower and upper on tmpfs it mounts itself)
cat > /work/scratch-staging/uo-inner.sh <<'IN'
T=/work/scratch-staging/mnt/uot; mount -t tmpfs tmpfs $T; mkdir -p $T/l/d $T/u $T/w $T/m
for o in "" ",userxattr" ",userxattr,redirect_dir=on" ",userxattr,redirect_dir=follow" ",userxattr,metacopy=on" ",userxattr,index=on" ",userxattr,nfs_export=on" ",userxattr,xino=on" ",userxattr,volatile"; do
  if out=$(mount -t overlay overlay -o lowerdir=$T/l,upperdir=$T/u,workdir=$T/w$o $T/m 2>&1); then
     printf '  %-32s mounted: %s\n' "'$o'" "$(grep " $T/m " /proc/self/mounts | sed 's/.*workdir=[^,]*//;s/ 0 0//')"; umount $T/m
  else printf '  %-32s refused: %s\n' "'$o'" "$out"; fi
  rm -rf $T/u/* $T/w/*
done
IN
mkdir -p /work/scratch-staging/mnt/uot
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all unshare -Ur -m bash /work/scratch-staging/uo-inner.sh
