#!/bin/bash
# a merged folder (in both layers) whose lower side a daemon changes during the mount
S=/work/scratch-staging
unshare -m --propagation private bash -c '
S=/work/scratch-staging; set -e
mkdir -p $S/mnt/state; mount -o loop $S/state.img $S/mnt/state
R=$S/mnt/state/mrun; L=$S/mlower; rm -rf $R $L; mkdir -p $R/upper $R/work $R/merged $L/m/sub
echo a > $L/m/a; echo s > $L/m/sub/s
mount -t overlay overlay -o lowerdir=$L,upperdir=$R/upper,workdir=$R/work $R/merged
M=$R/merged
echo cmd > $M/m/c; echo "1. command created m/c; ls m: $(ls $M/m | tr "\n" " ")"
python3 - $M <<PY
import os,sys
M=sys.argv[1]; d=os.open(M+"/m", os.O_RDONLY|os.O_DIRECTORY)
print("   held dir fd lists", sorted(os.listdir(d)))
open("/work/scratch-staging/mlower/m/daemon","w").write("d\n")
os.unlink("/work/scratch-staging/mlower/m/a")
os.lseek(d,0,0); print("2. daemon created m/daemon, deleted m/a; same dir fd after rewind lists", sorted(os.listdir(d)))
print("   fresh ls m:", sorted(os.listdir(M+"/m")))
for n in ["a","daemon"]:
    try: print("   read m/%s:"%n, repr(open(M+"/m/"+n).read()))
    except OSError as x: print("   read m/%s:"%n, x)
PY
rm -r $L/m/sub && echo "3. daemon removed lower m/sub; merged ls m: $(ls $M/m 2>&1 | tr "\n" " "); ls m/sub: $(ls $M/m/sub 2>&1)"
rm -r $L/m && echo "4. daemon removed lower m entirely; ls m: $(ls $M/m 2>&1 | tr "\n" " "); touch m/new: $(touch $M/m/new 2>&1 && echo ok)"
'
