// The workload of Benchmarks/supervisor.sh: repeats one metadata call on one
// file and prints nanoseconds per call, so that the same binary measures the
// native call and the supervised one.
//   supervised-calls OPERATION FILE COUNT
// `floor`, `floor-poll`, `floor-no-sync` and `floor-poll-no-sync` measure
// instead the least any supervisor costs: this thread's chmod goes to a second
// thread of this process through seccomp user notification, which answers at
// once without doing anything (blocking in RECV, or polling first as the
// launcher's wait loop does; with or without SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static int listener = -1;
static int polling = 0;
static int synchronous = 1;

static void *answer(void *unused) {
    (void)unused;
    for (;;) {
        struct seccomp_notif request;
        memset(&request, 0, sizeof(request));
        if (polling) {
            struct pollfd fd = { .fd = listener, .events = POLLIN };
            if (poll(&fd, 1, -1) < 0) continue;
        }
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &request) != 0) continue;
        struct seccomp_notif_resp response = { .id = request.id };
        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
    }
    return NULL;
}

static void supervise_chmod_on_this_thread(void) {
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_chmod, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = { .len = sizeof(code) / sizeof(code[0]), .filter = code };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) { perror("no_new_privs"); exit(1); }
    // Without TSYNC the filter holds this thread only; the answering thread stays free.
    listener = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
    if (listener < 0) { perror("seccomp"); exit(1); }
    const unsigned long set_flags = _IOW('!', 4, uint64_t);  // SECCOMP_IOCTL_NOTIF_SET_FLAGS
    if (synchronous) ioctl(listener, set_flags, (uint64_t)1);  // SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, as the launcher asks
    pthread_t thread;
    pthread_create(&thread, NULL, answer, NULL);
}

static int once(const char *operation, const char *file, int fd, long i) {
    if (!strcmp(operation, "chmod")) return chmod(file, (i & 1) ? 0644 : 0640);
    if (!strcmp(operation, "fchmodat")) return fchmodat(AT_FDCWD, file, (i & 1) ? 0644 : 0640, 0);
    if (!strcmp(operation, "fchmod")) return fchmod(fd, (i & 1) ? 0644 : 0640);
    if (!strcmp(operation, "utimensat")) return utimensat(AT_FDCWD, file, NULL, 0);  // touch
    if (!strcmp(operation, "chown")) return chown(file, getuid(), getgid());
    if (!strcmp(operation, "lchown")) return lchown(file, getuid(), getgid());
    if (!strcmp(operation, "getxattr")) {
        char value[64];
        return getxattr(file, "user.bench", value, sizeof(value)) < 0 ? -1 : 0;
    }
    if (!strcmp(operation, "lgetxattr-absent")) {  // what ls -l asks for every file
        char value[64];
        return lgetxattr(file, "security.selinux", value, sizeof(value)) < 0 && errno != ENODATA ? -1 : 0;
    }
    if (!strcmp(operation, "listxattr")) {
        char list[256];
        return listxattr(file, list, sizeof(list)) < 0 ? -1 : 0;
    }
    fprintf(stderr, "unknown operation %s\n", operation);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s OPERATION FILE COUNT\n", argv[0]);
        return 2;
    }
    const char *operation = argv[1], *file = argv[2];
    long count = atol(argv[3]);
    if (!strncmp(operation, "floor", 5)) {
        polling = strstr(operation, "poll") != NULL;
        synchronous = strstr(operation, "no-sync") == NULL;
        supervise_chmod_on_this_thread();
        operation = "chmod";
    }
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { perror(file); return 1; }
    if (!strcmp(operation, "getxattr") && setxattr(file, "user.bench", "value", 5, 0) != 0) { perror("setxattr"); return 1; }
    for (long i = 0; i < count / 10 + 1; i++) once(operation, file, fd, i);  // warm up
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < count; i++) {
        if (once(operation, file, fd, i) != 0) { perror(operation); return 1; }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = (end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec);
    printf("%.1f\n", ns / count);
    return 0;
}
