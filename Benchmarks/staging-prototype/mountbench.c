// mountbench: cost of putting a grant in place, as a bind (open_tree CLONE + move_mount)
// against a staged grant (fsopen overlay + fsconfig + fsmount + move_mount), new mount API.
//   mountbench bind|overlay|overlay-userxattr LOWER UPPER WORK TARGET COUNT
// Prints the median microseconds of COUNT mount+unmount pairs (mount part only).
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
#define CHK(x) do { if ((x) < 0) { perror(#x); exit(1); } } while (0)
int main(int argc, char **argv) {
    if (argc != 7) { fprintf(stderr, "usage\n"); return 2; }
    const char *mode = argv[1], *lower = argv[2], *upper = argv[3], *work = argv[4], *target = argv[5];
    int n = atoi(argv[6]); double *t = calloc(n, sizeof *t);
    for (int i = 0; i < n; i++) {
        double t0 = now_us(); int mfd;
        if (!strcmp(mode, "bind")) {
            CHK(mfd = syscall(SYS_open_tree, AT_FDCWD, lower, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
            struct mount_attr a = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
            CHK(syscall(SYS_mount_setattr, mfd, "", AT_EMPTY_PATH, &a, sizeof a));
        } else {
            int fs; CHK(fs = syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC));
            CHK(syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir+", lower, 0));
            CHK(syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir", upper, 0));
            CHK(syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir", work, 0));
            if (!strcmp(mode, "overlay-userxattr")) CHK(syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0));
            CHK(syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0));
            CHK(mfd = syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
            close(fs);
        }
        CHK(syscall(SYS_move_mount, mfd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH));
        t[i] = now_us() - t0;
        close(mfd);
        CHK(umount2(target, MNT_DETACH));
    }
    qsort(t, n, sizeof *t, cmp);
    printf("%s: median %.1f us, p25 %.1f, p75 %.1f\n", mode, t[n / 2], t[n / 4], t[3 * n / 4]);
    return 0;
}
