import sys, statistics
rows=[l.split() for l in open(sys.argv[1]) if l[0].isdigit()]
hdr=open(sys.argv[1]).readline().split()
cols=list(zip(*[[float(x) for x in r] for r in rows]))
for i,h in enumerate(hdr[1:],1): print("%-20s median %8.0f us  (p25 %8.0f, p75 %8.0f)" % (h, statistics.median(cols[i]), *statistics.quantiles(cols[i],n=4)[0:3:2]))
# per-round ratios
import itertools
def ratio(a,b): return statistics.median([y/x for x,y in zip(cols[a],cols[b])])
print("create ratio (median of per-round staged/plain): %.3f" % ratio(1,2))
print("read ratio first pass: %.3f, second pass: %.3f" % (ratio(3,4), ratio(3,5)))
