import glob, sys
n = 0
for f in sorted(glob.glob(sys.argv[1] + "/f*/n*.md")):
    with open(f, "rb") as h: n += len(h.read())
