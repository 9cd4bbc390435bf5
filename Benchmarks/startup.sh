#!/usr/bin/env bash
# Start-up and a launch's fixed costs, against peers in the same turns
# (Benchmarks/interleaved.c: one run of each command per round, in a
# shuffled order), with the ratios the targets are stated in:
#   `sandboxed-run --version` within 0.5 ms of a static Swift binary that
#   imports FoundationEssentials (and prints);
#   `run -- /bin/true` <= 1.2x bubblewrap's isolated line (goal 1.0x), and
#   <= 1.0x bubblewrap building the same view (Benchmarks/bwrap-view.py).
# Then what no other load moves: instructions of `--version` and of the
# FoundationEssentials hello (callgrind), and the cost of one CPUID here
# (every glibc program runs about 70 of them before main: on a VM that
# traps them, that is most of a small program's start).
# Prints figures and ratios; asserts nothing (timing belongs here).
#   Benchmarks/startup.sh [ROUNDS]                 (default 300)
#   BEFORE=/path/to/older/sandboxed-run Benchmarks/startup.sh
#       also that build's --version and run, in the same turns
#   BIN=PATH    measure this launcher instead of building scripts/build-release's
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-300}"
scripts/install-deps
# Not under /tmp: bubblewrap's view has a /tmp of its own.
root="$(mktemp -d -p /var/tmp sandboxed-run-startup.XXXXXX)"
trap 'rm -rf "$root"' EXIT
# Fresh copies, as Benchmarks/launch.sh measures: how a binary's pages came
# into the page cache moves its start.
cp "${BIN:-$(scripts/build-release)}" "$root/sandboxed-run"
bin="$root/sandboxed-run"
if [ -n "${BEFORE:-}" ]; then
    cp "$BEFORE" "$root/sandboxed-run-before"
    BEFORE="$root/sandboxed-run-before"
fi

# The peers: static Swift binaries, as the launcher is one. The
# FoundationEssentials one is the target's reference; the same linked as a
# static PIE with packed relocations (as scripts/build-release links) shows
# what position independence costs at start.
cat > "$root/hello.swift" <<'SWIFT'
print("hello")
SWIFT
cat > "$root/hello-essentials.swift" <<'SWIFT'
import FoundationEssentials
print(String(decoding: Data("hello".utf8), as: UTF8.self))
SWIFT
swiftc -O -static-executable "$root/hello.swift" -o "$root/hello" 2>/dev/null
swiftc -O -static-executable "$root/hello-essentials.swift" -o "$root/hello-essentials" 2>/dev/null
swiftc -O -static-executable -use-ld=lld -Xclang-linker -static-pie -Xlinker -z -Xlinker pack-relative-relocs \
    "$root/hello-essentials.swift" -o "$root/hello-essentials-pie" 2>/dev/null
cat > "$root/cpuid.c" <<'C'
#include <cpuid.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
int main(void) {
    unsigned a, b, c, d, n = 2000;
    double start = now();
    for (unsigned i = 0; i < n; i++) __cpuid_count(4, i & 3, a, b, c, d);
    printf("%.2f\n", (now() - start) / n);
    return 0;
}
C
cc -O2 -o "$root/cpuid" "$root/cpuid.c"

export XDG_DATA_HOME="$root/data" XDG_STATE_HOME="$root/state"
"$bin" run --app bench -- /bin/true  # the container, outside the measurement
container="$("$bin" run --app bench -- /usr/bin/printenv SANDBOX_CONTAINER)"
bwrap="$(command -v bwrap)"
isolated="$bwrap --ro-bind / / --unshare-all --new-session --die-with-parent --dev /dev --proc /proc --tmpfs /tmp /bin/true"
mapfile -t same_view < <(python3 Benchmarks/bwrap-view.py Policies/writer.plist --bind "$container")
same_view[0]="$bwrap"
same_view="${same_view[*]} /bin/true"
$same_view || { echo "bubblewrap cannot build the policy's view: $same_view" >&2; exit 1; }

names=("/bin/true" "static Swift hello" "static Swift hello, FoundationEssentials" "the same, static PIE"
       "sandboxed-run --version" "sandboxed-run run -- /bin/true" "bwrap isolated" "bwrap same view")
commands=("/bin/true" "$root/hello" "$root/hello-essentials" "$root/hello-essentials-pie"
          "$bin --version" "$bin run --app bench -- /bin/true" "$isolated" "$same_view")
if [ -n "${BEFORE:-}" ]; then
    names+=("before: --version" "before: run -- /bin/true")
    commands+=("$BEFORE --version" "$BEFORE run --app bench -- /bin/true")
fi
cc -O2 -o "$root/interleaved" Benchmarks/interleaved.c
"$root/interleaved" "$rounds" 20 "${commands[@]}" > "$root/interleaved.txt"

# Instructions, which load does not move (callgrind cannot read the DWARF 5
# the toolchain writes: it counts copies without it).
instructions() {
    objcopy --strip-debug "$1" "$root/counted"
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$root/counted" "${@:2}" 2>&1 >/dev/null |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
counts=""
if command -v valgrind >/dev/null; then
    counts="$(instructions "$bin" --version) $(instructions "$root/hello-essentials")"
    if [ -n "${BEFORE:-}" ]; then counts="$counts $(instructions "$BEFORE" --version)"; fi
fi

python3 - "$root/interleaved.txt" "$rounds" "$("$root/cpuid")" "$counts" "${names[@]}" <<'PY'
import sys
path, rounds, cpuid, counts, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4].split(), sys.argv[5:]
rows = [[float(x) for x in line.split()[:3]] for line in open(path)]
median = {name: row[0] for name, row in zip(names, rows)}
print(f"in turns, {rounds} rounds (medians and quartiles, ms):")
for name, row in zip(names, rows):
    print(f"  {name:42} {row[0]:7.2f}  ({row[1]:.2f}-{row[2]:.2f})")
print("\nthe targets, in these turns:")
over = median["sandboxed-run --version"] - median["static Swift hello, FoundationEssentials"]
print(f"  --version - static Swift hello with FoundationEssentials   {over:+.2f} ms  target <= 0.5: {'met' if over <= 0.5 else 'MISSED'}")
pie = median["the same, static PIE"] - median["static Swift hello, FoundationEssentials"]
print(f"    (of which a static PIE's relocations, as linked alone:   {pie:+.2f} ms)")
for label, theirs, target in [("run / bwrap isolated", "bwrap isolated", 1.2), ("run / bwrap same view", "bwrap same view", 1.0)]:
    ratio = median["sandboxed-run run -- /bin/true"] / median[theirs]
    print(f"  {label:58} x{ratio:.3f}  target <= {target}: {'met' if ratio <= target else 'MISSED'}")
if "before: --version" in median:
    print(f"\nthis build over BEFORE, same turns: --version x{median['sandboxed-run --version'] / median['before: --version']:.3f}, "
          f"run x{median['sandboxed-run run -- /bin/true'] / median['before: run -- /bin/true']:.3f}")
if counts:
    print(f"\ninstructions (callgrind): --version {int(counts[0]):,}; the FoundationEssentials hello {int(counts[1]):,}"
          + (f"; BEFORE's --version {int(counts[2]):,}" if len(counts) > 2 else ""))
print(f"\none CPUID here: {cpuid:.2f} us (glibc's start runs about 70 in every process: "
      f"~{70 * cpuid / 1000:.2f} ms of each program's start, the launcher's, bubblewrap's and /bin/true's alike)")
PY
