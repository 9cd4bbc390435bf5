"""A launch of /bin/true without an allowed-hosts list: this build against an
earlier one (before the network by name), interleaved. argv: this binary,
the earlier binary, scratch folder, rounds. What issue 33's "policies without
the key pay nothing" is measured by (Benchmarks/network.sh prints the rest)."""
import os, statistics, subprocess, sys, time

head, base, root, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
env = dict(os.environ, XDG_DATA_HOME=root + "/data", XDG_STATE_HOME=root + "/state")

def timed(binary):
    start = time.perf_counter()
    subprocess.run([binary, "run", "--app", "com.example.bench", "--", "/bin/true"], env=env, check=True)
    return time.perf_counter() - start

for _ in range(5): timed(head); timed(base)
a, b = [], []
for _ in range(rounds):
    a.append(timed(head)); b.append(timed(base))
m = statistics.median
ratio = m(a) / m(b)
print(f"launch /bin/true, no key: this build {m(a)*1e3:.2f} ms, earlier build {m(b)*1e3:.2f} ms, ratio {ratio:.3f} "
      f"(target <= 1.02: {'met' if ratio <= 1.02 else 'missed'})")
