#!/usr/bin/env bash
# Fuzzes the bookmark decoder with libFuzzer (from the Swift toolchain).
#   Fuzz/run.sh [SECONDS]        findings land in Fuzz/findings/ (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
scripts/install-deps
# gold crashes linking the sanitizer runtimes; the toolchain's lld does not.
toolset="$(mktemp)"
printf '{"schemaVersion": "1.0", "linker": {"path": "%s"}}' "$(dirname "$(readlink -f "$(command -v swift)")")/ld.lld" > "$toolset"
swift build --product bookmark-fuzzer --scratch-path .build-fuzz --toolset "$toolset" \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DFUZZING >&2
rm -f "$toolset"
mkdir -p Fuzz/findings
corpus="$(mktemp -d)"
trap 'rm -rf "$corpus" /tmp/sandboxed-run-fuzz-*' EXIT
.build-fuzz/debug/bookmark-fuzzer -max_total_time="$seconds" -artifact_prefix=Fuzz/findings/ "$corpus"
