// stagebench: the file operations of issue #32's targets, timed in-process.
//   stagebench create DIR N TAG   create N small files (O_CREAT|O_EXCL, 200 bytes, close)
//                                 spread over DIR's existing subfolders, named TAG-i
//   stagebench read DIR N         open+read+close N existing files (the vault's), in order
// Prints microseconds for the whole loop. With STAGEBENCH_NOTIFY=1 every openat
// goes through seccomp user notification to a supervisor thread that opens the
// path itself and injects the fd (SECCOMP_IOCTL_NOTIF_ADDFD): the floor of a
// copy-on-first-write supervisor (design 2a).
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
#include <stdatomic.h>

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static _Atomic int listener = -1;

static void *supervise(void *unused) {
    (void)unused;
    while (listener < 0) usleep(100);
    for (;;) {
        struct seccomp_notif req; struct seccomp_notif_resp resp;
        memset(&req, 0, sizeof req);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) { if (errno == EINTR || errno == ENOENT) continue; return NULL; }
        memset(&resp, 0, sizeof resp); resp.id = req.id;
        // same address space: read the path directly (a real supervisor reads /proc/PID/mem or process_vm_readv)
        const char *path = (const char *)(uintptr_t)req.data.args[1];
        int fd = openat((int)req.data.args[0], path, (int)req.data.args[2] | O_CLOEXEC, (mode_t)req.data.args[3]);
        if (fd < 0) { resp.error = -errno; ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp); continue; }
        struct seccomp_notif_addfd add = { .id = req.id, .flags = SECCOMP_ADDFD_FLAG_SEND, .srcfd = fd, .newfd = 0, .newfd_flags = O_CLOEXEC };
        ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
        close(fd);
    }
}

static void install_notify(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    pthread_t t; pthread_create(&t, NULL, supervise, NULL);  // before the filter: the supervisor thread is not filtered
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) { perror("seccomp"); exit(1); }
}

static char **subdirs; static int nsub;
static void list_subdirs(const char *dir) {
    DIR *d = opendir(dir); struct dirent *e; subdirs = calloc(4096, sizeof *subdirs);
    while ((e = readdir(d))) if (e->d_type == DT_DIR && e->d_name[0] != '.') asprintf(&subdirs[nsub++], "%s/%s", dir, e->d_name);
    closedir(d);
    if (nsub == 0) { subdirs[nsub++] = strdup(dir); }
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: stagebench create DIR N TAG | read DIR N\n"); return 2; }
    int n = atoi(argv[3]); char buf[4096]; memset(buf, 'x', sizeof buf); char path[4096];
    list_subdirs(argv[2]);
    // the read set: the first files of each subfolder, listed before timing
    char **files = NULL; int nfiles = 0;
    if (!strcmp(argv[1], "read")) {
        files = calloc(n, sizeof *files);
        for (int s = 0; nfiles < n && s < nsub; s++) {
            DIR *d = opendir(subdirs[s]); struct dirent *e;
            while (nfiles < n && (e = readdir(d))) if (e->d_type == DT_REG) asprintf(&files[nfiles++], "%s/%s", subdirs[s], e->d_name);
            closedir(d);
        }
        if (nfiles < n) { fprintf(stderr, "only %d files\n", nfiles); return 1; }
    }
    if (getenv("STAGEBENCH_NOTIFY")) install_notify();
    double t0 = now_us();
    if (!strcmp(argv[1], "create")) {
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/%s-%d.md", subdirs[i % nsub], argv[4], i);
            int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            if (fd < 0 || write(fd, buf, 200) != 200) { perror(path); return 1; }
            close(fd);
        }
    } else {
        for (int i = 0; i < n; i++) {
            int fd = open(files[i], O_RDONLY | O_CLOEXEC);
            if (fd < 0 || read(fd, buf, sizeof buf) < 0) { perror(files[i]); return 1; }
            close(fd);
        }
    }
    printf("%.0f\n", now_us() - t0);
    return 0;
}
