// Processes and threads: pidfds, another thread's descriptors and memory, capabilities, forwarded signals.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

#include <linux/sockios.h>
#include <spawn.h>
#include <sys/ioctl.h>

int csb_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int csb_pidfd_send_signal(int pidfd, int sig) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

int csb_copy_fd_of_thread(pid_t tid, int fd) {
    // PIDFD_THREAD (Linux 6.9) names a thread that does not lead its group.
    int pidfd = (int)syscall(SYS_pidfd_open, tid, O_EXCL);
    if (pidfd < 0) pidfd = (int)syscall(SYS_pidfd_open, tid, 0);
    if (pidfd < 0) return -1;
    int copy = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    int saved = errno;
    close(pidfd);
    errno = saved;
    return copy;
}

unsigned int csb_device_major(uint64_t device) {
    return major((dev_t)device);
}

int csb_ancestor_identity(int dirfd, int levels, uint64_t *device, uint64_t *inode) {
    // "../../.." resolved in one walk, so that the answer holds at one moment
    // and costs no descriptor; ".." crosses mounts as the kernel's own walk does.
    char path[3 * 1024];
    if (levels < 1 || levels > 1024) { errno = EINVAL; return -1; }
    for (int level = 0; level < levels; level++) memcpy(path + 3 * level, "../", 3);
    path[3 * levels - 1] = '\0';
    struct stat status;
    if (fstatat(dirfd, path, &status, AT_SYMLINK_NOFOLLOW) != 0) return -1;
    *device = (uint64_t)status.st_dev;
    *inode = (uint64_t)status.st_ino;
    return 0;
}

int csb_open_ancestor(int dirfd, int levels) {
    char path[3 * 1024];
    if (levels < 1 || levels > 1024) { errno = EINVAL; return -1; }
    for (int level = 0; level < levels; level++) memcpy(path + 3 * level, "../", 3);
    path[3 * levels - 1] = '\0';
    return csb_openat2_path(dirfd, path, 0);
}

int csb_inotify_watch_fd(int inotify_fd, int target_fd, uint32_t mask) {
    char path[32];
    csb_proc_fd_path(target_fd, path);
    return inotify_add_watch(inotify_fd, path, mask & ~(uint32_t)IN_DONT_FOLLOW);
}

int csb_pidfd_wait(int pidfd, int *status) {
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED) != 0) return -1;
    switch (info.si_code) {
    case CLD_EXITED: *status = (info.si_status & 0xff) << 8; break;
    case CLD_KILLED: *status = info.si_status & 0x7f; break;
    case CLD_DUMPED: *status = (info.si_status & 0x7f) | 0x80; break;
    default: errno = ECHILD; return -1;
    }
    return 0;
}

ssize_t csb_read_process_memory(pid_t pid, uint64_t address, void *buffer, size_t length) {
    struct iovec local = { .iov_base = buffer, .iov_len = length };
    struct iovec remote = { .iov_base = (void *)(uintptr_t)address, .iov_len = length };
    return process_vm_readv(pid, &local, 1, &remote, 1, 0);
}

static int csb_thread_caps(struct __user_cap_data_struct data[2], int set) {
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    return (int)syscall(set ? SYS_capset : SYS_capget, &header, data);
}

_Static_assert(sizeof(struct __user_cap_data_struct[2]) == 6 * sizeof(uint32_t), "capability data, version 3");

int csb_thread_effective_caps_clear(uint32_t saved[6]) {
    struct __user_cap_data_struct data[2];
    if (csb_thread_caps(data, 0) != 0) return -1;
    memcpy(saved, data, sizeof(data));  // the whole state, restored with one capset
    if (data[0].effective == 0 && data[1].effective == 0) return 0;
    data[0].effective = 0;
    data[1].effective = 0;
    return csb_thread_caps(data, 1);
}

int csb_thread_effective_caps_restore(const uint32_t saved[6]) {
    struct __user_cap_data_struct data[2];
    memcpy(data, saved, sizeof(data));
    if (data[0].effective == 0 && data[1].effective == 0) return 0;
    return csb_thread_caps(data, 1);
}

static volatile sig_atomic_t csb_forward_pid = 0;
static volatile sig_atomic_t csb_forward_pending = 0;

static void csb_forward_handler(int signo) {
    int saved = errno;
    pid_t pid = (pid_t)csb_forward_pid;
    if (pid > 0) kill(pid, signo);
    else csb_forward_pending = signo;  // held until the child's pid is known
    errno = saved;
}

int csb_forward_signals_to(pid_t pid) {
    static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
    csb_forward_pid = pid;
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = pid >= 0 ? csb_forward_handler : SIG_DFL;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++) {
        if (sigaction(forwarded[i], &action, NULL) != 0) return -1;
        sigaddset(&set, forwarded[i]);
    }
    // A launcher started with these blocked (as some supervisors do) would never see them.
    if (pthread_sigmask(SIG_UNBLOCK, &set, NULL) != 0) return -1;
    int pending = (int)csb_forward_pending;
    if (pid > 0 && pending != 0) {
        csb_forward_pending = 0;
        kill(pid, pending);
    }
    return 0;
}

void csb_forward_signals_stop(pid_t pid) {
    if (csb_forward_pid == pid) csb_forward_pid = 0;
}

int csb_socket_network_namespace(int socket) {
    return ioctl(socket, SIOCGSKNS);
}

int csb_same_open_file(int a, int b) {
    pid_t self = getpid();
    long same = syscall(SYS_kcmp, self, self, 0 /* KCMP_FILE */, (unsigned long)a, (unsigned long)b);
    return same < 0 ? -1 : same == 0;
}

int csb_inotify_rm_watch(int instance, int watch) {
    return inotify_rm_watch(instance, watch);
}

int csb_pipe_cloexec(int *fds) {
    return pipe2(fds, O_CLOEXEC);
}

int csb_spawn_close_from(void *actions, int lowest) {
    int error = posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, lowest);
    if (error != 0) {
        errno = error;
        return -1;
    }
    return 0;
}
