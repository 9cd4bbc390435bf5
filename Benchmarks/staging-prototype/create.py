import os, sys
d = sys.argv[1]; p = os.getpid()
for i in range(2000):
    with open("%s/f%02d/p%d-%d.md" % (d, i % 20 + 1, p, i), "w") as f: f.write("x" * 200)
