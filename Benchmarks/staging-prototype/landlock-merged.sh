#!/bin/bash
# Landlock on an overlay: a rule on the lower / the upper / the merged folder, which writes does each allow?
# root (init userns), then uid 65534 in its own user namespace (userxattr). Lower on / (ext4), upper on tmpfs.
S=/work/scratch-staging; P=$S/proto
cat > $S/ll-inner.sh <<'IN'
S=/work/scratch-staging; P=$S/proto; T=$1; O=$2
mount -t tmpfs tmpfs $T; mkdir -p $T/u $T/w $T/m
mount -t overlay overlay -o lowerdir=$S/lllower,upperdir=$T/u,workdir=$T/w$O $T/m || exit 1
try() { if "$@" 2>/dev/null; then echo ok; else echo denied; fi; }
for rule in lower upper merged; do
  case $rule in lower) R=$S/lllower;; upper) R=$T/u;; merged) R=$T/m;; esac
  printf '  rule on %-6s: create in merged %s, append to lower file via merged %s, mkdir+mv in merged %s, write lower directly %s\n' $rule \
   "$(try $P/llexec $R -- sh -c "echo x > $T/m/new-$rule")" \
   "$(try $P/llexec $R -- sh -c "echo y >> $T/m/a")" \
   "$(try $P/llexec $R -- sh -c "mkdir $T/m/dd-$rule && mv $T/m/dd-$rule $T/m/de-$rule")" \
   "$(try $P/llexec $R -- sh -c "echo z >> $S/lllower/a")"
done
IN
rm -rf $S/lllower; mkdir -p $S/lllower $S/mnt/llt; echo a > $S/lllower/a
echo "# root, init user namespace"
unshare -m --propagation private bash $S/ll-inner.sh $S/mnt/llt ""
chown -R 65534:65534 $S/lllower $S/mnt/llt
echo "# uid 65534, own user namespace, userxattr"
setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all unshare -Ur -m bash $S/ll-inner.sh $S/mnt/llt ",userxattr"
echo "lower after: $(ls $S/lllower | tr '\n' ' ')"
