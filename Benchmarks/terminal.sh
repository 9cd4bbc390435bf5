#!/usr/bin/env bash
# Cost of the terminal relay: throughput of `cat` of a large file shown on a
# pty, directly and through `sandboxed-run run` (which gives the command a
# pty of its own and relays it), and the round-trip latency of a line typed
# into `cat`. Prints figures; asserts nothing.
#   Benchmarks/terminal.sh [MEGABYTES] [ROUND_TRIPS]
set -euo pipefail
cd "$(dirname "$0")/.."
megabytes="${1:-100}"
trips="${2:-200}"
scripts/install-deps
scripts/build-release >/dev/null
bin="$PWD/.build/release/sandboxed-run"
export XDG_DATA_HOME
XDG_DATA_HOME="$(mktemp -d)"
trap 'rm -rf "$XDG_DATA_HOME"' EXIT
container="$("$bin" container path --app bench)"
# Printable lines, as a log; base64 makes 3 bytes into 4.
head -c "$((megabytes * 768 * 1024))" /dev/urandom | base64 -w 100 > "$container/Documents/big"

python3 - "$bin" "$container/Documents/big" "$trips" <<'PY'
import os, pty, statistics, subprocess, sys, termios, time
bin, big, trips = sys.argv[1], sys.argv[2], int(sys.argv[3])
size = os.path.getsize(big)
sandboxed = [bin, "run", "--app", "bench", "--"]

def on_pty(command):
    """Starts command with a fresh pty as its terminal, as a terminal emulator does."""
    master, terminal = pty.openpty()
    process = subprocess.Popen(command, stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True)
    os.close(terminal)  # the master reads EIO once every holder of the terminal side is gone
    return master, process

def shown(command):
    """Seconds until everything command printed was read from the pty."""
    start = time.perf_counter()
    master, process = on_pty(command)
    total = 0
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        total += len(chunk)
    process.wait()
    os.close(master)
    elapsed = time.perf_counter() - start
    assert total >= size, f"{command}: shown {total} of {size} bytes"
    return elapsed

def piped(command):
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start

def round_trips(command):
    """Median seconds from typing a line to seeing cat print it back."""
    master, process = on_pty(command)
    time.sleep(0.5)  # let the launcher start and put the terminal in raw mode
    samples = []
    for i in range(trips):
        line = b"ping%d" % i
        start = time.perf_counter()
        os.write(master, line + b"\r")
        seen = b""
        while seen.count(line + b"\r\n") < 2:  # the pty's echo, then cat's copy
            seen += os.read(master, 4096)
        samples.append(time.perf_counter() - start)
    os.write(master, b"\x04")  # Ctrl-D: end of file for cat
    process.wait()
    os.close(master)
    return statistics.median(samples)

runs = 3
print(f"cat of {size / 1e6:.0f} MB, best of {runs}:")
for name, measure, command in [
    ("directly on a pty", shown, ["cat", big]),
    ("sandboxed-run, output to a pipe (no relay)", piped, sandboxed + ["cat", "Documents/big"]),
    ("sandboxed-run on a pty (relayed)", shown, sandboxed + ["cat", "Documents/big"]),
]:
    best = min(measure(command) for _ in range(runs))
    print(f"  {name:45} {best * 1e3:8.0f} ms {size / best / 1e6:8.0f} MB/s")
print(f"\nround trip of a typed line through cat, median of {trips}:")
for name, command in [("directly on a pty", ["cat"]), ("sandboxed-run on a pty (relayed)", sandboxed + ["cat"])]:
    print(f"  {name:45} {round_trips(command) * 1e6:8.0f} µs")
PY
