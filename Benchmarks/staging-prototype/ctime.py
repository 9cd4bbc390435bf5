# do two writes within one tick get distinct ctimes? (multigrain timestamps, 6.13+) and how does ctime relate to CLOCK_REALTIME_COARSE / CLOCK_REALTIME
import os, time, sys
p = sys.argv[1]; same = 0; dist = 0; behind = 0; behind_coarse = 0; n = 20000
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
for i in range(n):
    os.pwrite(fd, b"a", 0); c1 = os.fstat(fd).st_ctime_ns
    t_fine = time.clock_gettime_ns(time.CLOCK_REALTIME); t_coarse = time.clock_gettime_ns(5)
    os.pwrite(fd, b"b", 0); c2 = os.fstat(fd).st_ctime_ns
    same += c1 == c2
    behind += c2 < t_fine; behind_coarse += c2 < t_coarse
print("%d write pairs with a stat between: identical ctime %d; second ctime earlier than CLOCK_REALTIME read before it: %d; earlier than CLOCK_REALTIME_COARSE: %d" % (n, same, behind, behind_coarse))
fd2 = os.open(p + "2", os.O_RDWR | os.O_CREAT, 0o600); same = 0
for i in range(n):
    os.pwrite(fd2, b"a", 0); c1 = os.fstat(fd2).st_ctime_ns; os.pwrite(fd2, b"b", 0); os.pwrite(fd2, b"c", 0); c2 = os.fstat(fd2).st_ctime_ns; same += c1 == c2
print("without a stat between the 2nd and 3rd write: identical ctime %d of %d" % (same, n))
