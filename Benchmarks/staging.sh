#!/usr/bin/env bash
# Staged grants (issue 32, docs/staging.md) against plain grants, with the
# release build, in one interleaved run (Benchmarks/staging.py): creating
# and reading 2,000 small files inside the sandbox, launching /bin/true with
# a grant of 10 and of 2,000 files (the first staged launch clones the
# folder; a later one reuses the clone), and accepting 2,000 changed files
# against `cp -a` of the same files followed by `sync`. Prints each
# measure's medians, its ratios in wall-clock and CPU time, and the
# issue's targets (met or missed); asserts nothing else.
#   Benchmarks/staging.sh [ROUNDS]     (default 15; SKIP_BUILD=1 uses the
#                                       release binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-15}"
[ "${SKIP_BUILD:-}" = 1 ] || { scripts/install-deps; scripts/build-release >/dev/null; }
# Not under /tmp: the private view has a /tmp of its own. The broker's state
# (the clones) is beside the folders, on the same filesystem.
root="$(mktemp -d -p /var/tmp sandboxed-run-staging.XXXXXX)"
trap 'rm -rf "$root"' EXIT
# A fresh copy, as launch.sh does: how a binary's pages came into the page
# cache moves its launch.
cp "$PWD/.build/release/sandboxed-run" "$root/sandboxed-run"
export XDG_DATA_HOME="$root/data" XDG_STATE_HOME="$root/state"
python3 Benchmarks/staging.py "$root/sandboxed-run" "$root" "$rounds"
