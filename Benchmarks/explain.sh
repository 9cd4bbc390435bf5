#!/bin/sh
# A denial-heavy workload (10,000 opens of a file outside every grant) and a
# normal one (tar xf of 2,000 files into the container), each run natively,
# under sandboxed-run, and under sandboxed-run --explain: times and ratios.
# Usage: Benchmarks/explain.sh [path/to/sandboxed-run]   (build with -c release for real figures)
set -eu
B=${1:-.build/release/sandboxed-run}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export HOME="$W/home" XDG_DATA_HOME="$W/home/data" XDG_STATE_HOME="$W/home/state"
mkdir -p "$HOME" "$W/outside" "$W/src"
echo secret > "$W/outside/secret"
i=0; while [ $i -lt 2000 ]; do echo "$i" > "$W/src/f$i"; i=$((i+1)); done
tar cf "$W/files.tar" -C "$W/src" .
DENY="import os
for i in range(10000):
    try: os.close(os.open('$W/outside/secret', os.O_RDONLY))
    except OSError: pass"
now() { date +%s%N; }
measure() {  # label, then the command
    label=$1; shift
    start=$(now); "$@" >/dev/null 2>&1 || true; end=$(now)
    echo $(( (end - start) / 1000000 ))
}
"$B" run --app com.example.bench -- /bin/true  # makes the container
C=$("$B" run --app com.example.bench -- /bin/sh -c 'echo $HOME')
cp "$W/files.tar" "$C/files.tar"
for workload in deny tar; do
    if [ $workload = deny ]; then
        native=$(measure native python3 -c "$DENY")
        plain=$(measure plain "$B" run --app com.example.bench -- python3 -c "$DENY")
        explain=$(measure explain "$B" run --app com.example.bench --explain --denials "$W/log" -- python3 -c "$DENY")
    else
        mkdir -p "$W/native"
        native=$(measure native tar xf "$W/files.tar" -C "$W/native")
        plain=$(measure plain "$B" run --app com.example.bench -- tar xf "$C/files.tar" -C "$C/tmp")
        rm -rf "$C/tmp/"*
        explain=$(measure explain "$B" run --app com.example.bench --explain -- tar xf "$C/files.tar" -C "$C/tmp")
    fi
    echo "$workload: native ${native} ms, sandboxed ${plain} ms, --explain ${explain} ms;" \
        "--explain/sandboxed $(awk "BEGIN{printf \"%.2f\", $explain/($plain?$plain:1)}")," \
        "sandboxed/native $(awk "BEGIN{printf \"%.2f\", $plain/($native?$native:1)}")"
done
