#!/usr/bin/env bash
# Live grants (docs/live-grants.md): attach and detach times, revocation
# reaching a running command, open+read+close in a live grant against a
# launch-time grant, and the launch cost of a policy that allows live grants,
# release build. Prints figures and ratios; asserts nothing.
#   Benchmarks/live-grants.sh [ROUNDS]       (REVOKE_TRIALS=20; SKIP_BUILD=1)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-200}"
[ "${SKIP_BUILD:-}" = 1 ] || scripts/build-release >/dev/null
root="$(mktemp -d /var/tmp/live-grants-bench.XXXXXX)"
trap 'rm -rf "$root"' EXIT
cp "$PWD/.build/release/sandboxed-run" "$root/sandboxed-run"
cc -O2 -o "$root/interleaved" Benchmarks/interleaved.c
cc -O2 -o "$root/live-grants-open" Benchmarks/live-grants-open.c
export XDG_DATA_HOME="$root/data" XDG_STATE_HOME="$root/state"
mkdir -p "$root/vault"
head -c 4096 /dev/urandom > "$root/vault/file"
# The writer policy, executing files of the container (the open benchmark
# runs from there), with the live-grant keys and without them.
python3 - Policies/writer.plist "$root" <<'PY'
import sys
text = open(sys.argv[1]).read()
text = text.replace("<key>org.sandboxed-run.files.execute</key>\n    <false/>", "<key>org.sandboxed-run.files.execute</key>\n    <true/>")
open(sys.argv[2] + "/keys.plist", "w").write(text)
for key in ["com.apple.security.files.user-selected.read-write", "com.apple.security.files.bookmarks.app-scope"]:
    text = text.replace(f"<key>{key}</key>\n    <true/>\n", "")
open(sys.argv[2] + "/bare.plist", "w").write(text)
PY
python3 Benchmarks/live-grants.py "$root/sandboxed-run" "$root" "$root/interleaved" "$root/live-grants-open" "$rounds"
