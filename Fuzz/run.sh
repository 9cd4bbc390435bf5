#!/usr/bin/env bash
# Fuzzes a decoder with libFuzzer (from the Swift toolchain), under ASan.
#   Fuzz/run.sh [SECONDS]           the bookmark decoder
#   Fuzz/run.sh policy [SECONDS]    the policy reader (XML and binary property lists, JSON),
#                                   seeded from Fuzz/PolicyCorpus and Fuzz/policy-seeds.py --large
#   Fuzz/run.sh live-grant [SECONDS] the live-grant wire protocol: both decoders, and a real broker
#                                   serving each input through its socket (Fuzz/LiveGrantOracle),
#                                   seeded from Fuzz/LiveGrantCorpus
# Further arguments go to libFuzzer, e.g. `Fuzz/run.sh policy 36000 -runs=10000000`.
# Findings land in Fuzz/findings/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
target=bookmark
if [ "${1:-}" = bookmark ] || [ "${1:-}" = policy ] || [ "${1:-}" = live-grant ]; then
    target="$1"
    shift
fi
seconds="${1:-60}"
[ $# -gt 0 ] && shift
scripts/install-deps
# gold crashes linking the sanitizer runtimes; the toolchain's lld does not.
toolset="$(mktemp)"
printf '{"schemaVersion": "1.0", "linker": {"path": "%s"}}' "$(dirname "$(readlink -f "$(command -v swift)")")/ld.lld" > "$toolset"
swift build --product "$target-fuzzer" --scratch-path .build-fuzz --toolset "$toolset" \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DFUZZING >&2
rm -f "$toolset"
mkdir -p Fuzz/findings
corpus="$(mktemp -d)"
trap 'rm -rf "$corpus" /tmp/sandboxed-run-fuzz-*' EXIT
flags=()
corpora=("$corpus")
if [ "$target" = policy ]; then
    # New inputs go to the first folder; the committed seeds stay as they are.
    # An input that takes two seconds is a finding: the reader is meant to be
    # linear (on a loaded machine, pass a larger -timeout=N, which wins).
    python3 Fuzz/policy-seeds.py --large "$corpus"
    flags=(-timeout=2 -dict=Fuzz/policy.dict)
    corpora=("$corpus" Fuzz/PolicyCorpus)
elif [ "$target" = live-grant ]; then
    # Past the largest request (8198 bytes); each input is decoded and served
    # in microseconds with buffers of at most 64 KiB: a second, or a single
    # allocation of 64 MiB, is a finding.
    flags=(-max_len=8400 -timeout=2 -malloc_limit_mb=64)
    corpora=("$corpus" Fuzz/LiveGrantCorpus)
fi
# A corpus folder among the arguments goes first: new inputs are kept there.
extra=()
for argument in "$@"; do
    if [ -d "$argument" ]; then corpora=("$argument" "${corpora[@]}"); else extra+=("$argument"); fi
done
".build-fuzz/debug/$target-fuzzer" -max_total_time="$seconds" -artifact_prefix=Fuzz/findings/ -print_final_stats=1 \
    "${flags[@]}" "${extra[@]}" "${corpora[@]}"
