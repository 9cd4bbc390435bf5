#!/bin/bash
# vaults and upper on one ext4 loop image (no discard), so the plain and staged writes land on the same filesystem
set -eu
W=/work/scratch-staging
mkdir -p $W/mnt/img; mount -o loop,nodiscard $W/state.img $W/mnt/img
export S=$W/mnt/img
UP=$S/state ./bench-overlay.sh "$@"
