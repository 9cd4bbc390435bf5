// Thin wrappers over raw syscalls. No retry here: callers retry EINTR in one place.
#define _GNU_SOURCE 1
#include "csandbox.h"

#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define CSB_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define CSB_LANDLOCK_RULE_PATH_BENEATH 1
#define CSB_LANDLOCK_RULE_NET_PORT 2

struct csb_landlock_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct csb_landlock_net_port_attr {
    uint64_t allowed_access;
    uint64_t port;
};

// The copies must match the kernel's layout byte for byte.
_Static_assert(sizeof(struct csb_landlock_ruleset_attr) == 24, "landlock_ruleset_attr (ABI 6)");
_Static_assert(sizeof(struct csb_landlock_path_beneath_attr) == 12, "landlock_path_beneath_attr");
_Static_assert(sizeof(struct csb_landlock_net_port_attr) == 16, "landlock_net_port_attr");
_Static_assert(sizeof(struct csb_seccomp_data) == sizeof(struct seccomp_data), "seccomp_data");
_Static_assert(sizeof(struct csb_seccomp_notif) == sizeof(struct seccomp_notif), "seccomp_notif");
_Static_assert(sizeof(struct csb_seccomp_notif_resp) == sizeof(struct seccomp_notif_resp), "seccomp_notif_resp");
_Static_assert(offsetof(struct csb_seccomp_notif, data) == offsetof(struct seccomp_notif, data), "seccomp_notif.data");

int csb_landlock_abi_version(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, CSB_LANDLOCK_CREATE_RULESET_VERSION);
    return abi < 0 ? 0 : (int)abi;
}

int csb_landlock_create_ruleset(const struct csb_landlock_ruleset_attr *attr) {
    // Older kernels reject a larger struct with non-zero tail fields, so pass
    // only as many fields as are in use.
    size_t size = sizeof(*attr);
    if (attr->scoped == 0) {
        size = offsetof(struct csb_landlock_ruleset_attr, scoped);
        if (attr->handled_access_net == 0) size = offsetof(struct csb_landlock_ruleset_attr, handled_access_net);
    }
    return (int)syscall(SYS_landlock_create_ruleset, attr, size, 0);
}

int csb_landlock_add_path_rule(int ruleset_fd, int parent_fd, uint64_t allowed_access) {
    struct csb_landlock_path_beneath_attr attr = { .allowed_access = allowed_access, .parent_fd = parent_fd };
    return (int)syscall(SYS_landlock_add_rule, ruleset_fd, CSB_LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
}

int csb_landlock_add_port_rule(int ruleset_fd, uint64_t port, uint64_t allowed_access) {
    struct csb_landlock_net_port_attr attr = { .allowed_access = allowed_access, .port = port };
    return (int)syscall(SYS_landlock_add_rule, ruleset_fd, CSB_LANDLOCK_RULE_NET_PORT, &attr, 0);
}

int csb_open_path(int dirfd, const char *path, int follow_symlinks) {
    int flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    return openat(dirfd, path, flags);
}

int csb_openat2_path(int dirfd, const char *path, int follow_symlinks) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    how.resolve = RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int csb_openat2_path_in_root(int root, const char *path, int follow_symlinks) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    how.resolve = RESOLVE_NO_MAGICLINKS | RESOLVE_IN_ROOT;
    return (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
}

int csb_openat2_path_beneath(int dirfd, const char *path, int follow_symlinks) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    how.resolve = RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

static void csb_proc_fd_path(int fd, char path[32]) {
    snprintf(path, 32, "/proc/self/fd/%d", fd);
}

int csb_chmod_fd(int fd, uint32_t mode) {
    // fchmodat2 (Linux 6.6) takes the O_PATH descriptor itself: no /proc walk.
    int done = (int)syscall(452 /* SYS_fchmodat2, not in Debian 12's headers */, fd, "", (mode_t)mode, AT_EMPTY_PATH);
    if (done == 0 || errno != ENOSYS) return done;
    char path[32];
    csb_proc_fd_path(fd, path);
    return fchmodat(AT_FDCWD, path, (mode_t)mode, 0);
}

int csb_chown_fd(int fd, uint32_t uid, uint32_t gid) {
    return fchownat(fd, "", (uid_t)uid, (gid_t)gid, AT_EMPTY_PATH);
}

int csb_utimens_fd(int fd, const int64_t *times_sec_nsec) {
    struct timespec ts[2];
    if (times_sec_nsec != NULL) {
        ts[0].tv_sec = times_sec_nsec[0]; ts[0].tv_nsec = times_sec_nsec[1];
        ts[1].tv_sec = times_sec_nsec[2]; ts[1].tv_nsec = times_sec_nsec[3];
    }
    return utimensat(fd, "", times_sec_nsec ? ts : NULL, AT_EMPTY_PATH);
}

int csb_setxattr_fd(int fd, const char *name, const void *value, size_t size, int flags) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return setxattr(path, name, value, size, flags);
}

int csb_removexattr_fd(int fd, const char *name) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return removexattr(path, name);
}

int csb_open_pty(int *master, int *terminal) {
    int fd = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    char name[64];
    if (grantpt(fd) != 0 || unlockpt(fd) != 0 || ptsname_r(fd, name, sizeof(name)) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int other = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (other < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *master = fd;
    *terminal = other;
    return 0;
}

_Static_assert(offsetof(struct csb_file_handle, f_handle) == offsetof(struct file_handle, f_handle), "file_handle");

int csb_name_to_handle(int fd, struct csb_file_handle *handle, int *mount_id, int *is_fid) {
    handle->handle_bytes = sizeof(handle->f_handle);
    *is_fid = 0;
    int rc = name_to_handle_at(fd, "", (struct file_handle *)handle, mount_id, AT_EMPTY_PATH);
    if (rc != 0 && errno == EOPNOTSUPP) {
        handle->handle_bytes = sizeof(handle->f_handle);
        rc = name_to_handle_at(fd, "", (struct file_handle *)handle, mount_id, AT_EMPTY_PATH | 0x200 /* AT_HANDLE_FID */);
        if (rc == 0) *is_fid = 1;
    }
    return rc;
}

int csb_open_by_handle(int mount_fd, struct csb_file_handle *handle) {
    return open_by_handle_at(mount_fd, (struct file_handle *)handle, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

int csb_filesystem_identity(int fd, uint64_t *fsid, uint64_t *type) {
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return -1;
    memcpy(fsid, &fs.f_fsid, sizeof(*fsid));
    *type = (uint64_t)fs.f_type;
    return 0;
}

int csb_birth_time(int fd, int64_t *seconds, uint32_t *nanoseconds) {
    struct statx st;
    if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_BTIME, &st) != 0) return -1;
    if (!(st.stx_mask & STATX_BTIME)) { errno = ENODATA; return -1; }
    *seconds = st.stx_btime.tv_sec;
    *nanoseconds = st.stx_btime.tv_nsec;
    return 0;
}

int csb_mount_facts(int fd, uint64_t *mount_id, int *is_mount_root, uint64_t *device, uint64_t *inode) {
    struct statx st;
    if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO | STATX_MNT_ID, &st) != 0) return -1;
    if (!(st.stx_mask & STATX_MNT_ID)) { errno = ENODATA; return -1; }
    *mount_id = st.stx_mnt_id;
    *is_mount_root = (st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) ? !!(st.stx_attributes & STATX_ATTR_MOUNT_ROOT) : -1;
    *device = (uint64_t)makedev(st.stx_dev_major, st.stx_dev_minor);
    *inode = st.stx_ino;
    return 0;
}

int csb_mount_id(int fd, uint64_t *mount_id) {
#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U
#endif
    struct statx st;
    if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_STATX_DONT_SYNC, STATX_MNT_ID, &st) != 0) return -1;
    if (!(st.stx_mask & STATX_MNT_ID)) { errno = EOPNOTSUPP; return -1; }
    *mount_id = st.stx_mnt_id;
    return 0;
}

int csb_memfd_create(const char *name) {
    return memfd_create(name, MFD_CLOEXEC);
}

int csb_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
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

int csb_seccomp_supported(void) {
    return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 ? -1 : 0;
}

int csb_seccomp_notify_supported(void) {
    struct seccomp_notif_sizes sizes;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return -1;
    // RECV copies the kernel's whole struct: refuse a kernel whose struct grew.
    if (sizes.seccomp_notif != sizeof(struct seccomp_notif) ||
        sizes.seccomp_notif_resp < sizeof(struct seccomp_notif_resp)) {
        errno = EOPNOTSUPP;
        return -1;
    }
    return 0;
}

int csb_seccomp_notify_receive(int listener, struct csb_seccomp_notif *notif) {
    memset(notif, 0, sizeof(*notif));  // the kernel insists on a zeroed buffer
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, notif);
}

int csb_seccomp_notify_id_valid(int listener, uint64_t id) {
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id);
}

int csb_seccomp_notify_respond(int listener, const struct csb_seccomp_notif_resp *resp) {
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp);
}

// MARK: The supervisor: attribute reads and the child's memory

ssize_t csb_getxattr_fd(int fd, const char *name, void *value, size_t size) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return getxattr(path, name, value, size);
}

ssize_t csb_listxattr_fd(int fd, char *list, size_t size) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return listxattr(path, list, size);
}

int csb_seccomp_notify_sync_wakeup(int listener) {
    // Not in Debian 12's linux/seccomp.h: SECCOMP_IOW(4, __u64) and flag 1.
    const unsigned long set_flags = _IOW('!', 4, uint64_t);
    uint64_t flags = 1;  // SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
    return ioctl(listener, set_flags, flags);
}

void csb_forward_signals_stop(pid_t pid) {
    if (csb_forward_pid == pid) csb_forward_pid = 0;
}

// MARK: Terminal relay

int csb_reopen_terminal(int fd, int flags) {
    struct stat before, after;
    if (fstat(fd, &before) != 0) return -1;
    if (!S_ISCHR(before.st_mode) || !isatty(fd)) { errno = ENOTTY; return -1; }
    // /dev/ptmx and /dev/pts/ptmx: opening either makes a new pty.
    if (major(before.st_rdev) == 5 && minor(before.st_rdev) == 2) { errno = ENXIO; return -1; }
    char path[32];
    csb_proc_fd_path(fd, path);
    int copy = open(path, flags | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    if (copy < 0) return -1;
    if (fstat(copy, &after) != 0 || !S_ISCHR(after.st_mode) || after.st_rdev != before.st_rdev) {
        close(copy);
        errno = ENOTTY;
        return -1;
    }
    return copy;
}

int csb_copy_window_size(int from, int to) {
    struct winsize size;
    if (ioctl(from, TIOCGWINSZ, &size) != 0) return -1;
    return ioctl(to, TIOCSWINSZ, &size);
}

int csb_bytes_readable(int fd) {
    int count = 0;
    if (ioctl(fd, FIONREAD, &count) != 0) return -1;
    return count;
}

// One pipe per watcher, so that every relay in the process wakes (a shared
// pipe would wake only the one that drains it). The handler takes no lock:
// it counts itself in `csb_window_in_flight`, and a watcher being removed
// waits for that count to drop before closing the pipe, so the handler never
// writes to an fd number that was closed and reused.
#define CSB_WINDOW_WATCHERS 64
static _Atomic int csb_window_write_fds[CSB_WINDOW_WATCHERS];
static _Atomic int csb_window_read_fds[CSB_WINDOW_WATCHERS];
static _Atomic int csb_window_in_flight = 0;
static struct sigaction csb_window_previous;
static pthread_once_t csb_window_once = PTHREAD_ONCE_INIT;
static int csb_window_installed = 0;

static void csb_window_handler(int signo, siginfo_t *info, void *context) {
    int saved = errno;
    atomic_fetch_add(&csb_window_in_flight, 1);
    for (int i = 0; i < CSB_WINDOW_WATCHERS; i++) {
        int fd = atomic_load(&csb_window_write_fds[i]);
        if (fd >= 0 && write(fd, "", 1) < 0) {}  // full: a wake-up is already pending
    }
    atomic_fetch_sub(&csb_window_in_flight, 1);
    if (csb_window_previous.sa_flags & SA_SIGINFO) {
        if (csb_window_previous.sa_sigaction != NULL) csb_window_previous.sa_sigaction(signo, info, context);
    } else if (csb_window_previous.sa_handler != SIG_DFL && csb_window_previous.sa_handler != SIG_IGN) {
        csb_window_previous.sa_handler(signo);
    }
    errno = saved;
}

static void csb_window_install(void) {
    for (int i = 0; i < CSB_WINDOW_WATCHERS; i++) {
        atomic_store(&csb_window_write_fds[i], -1);
        atomic_store(&csb_window_read_fds[i], -1);
    }
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = csb_window_handler;
    action.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    csb_window_installed = sigaction(SIGWINCH, &action, &csb_window_previous) == 0;
}

int csb_window_watch(void) {
    pthread_once(&csb_window_once, csb_window_install);
    if (!csb_window_installed) { errno = EINVAL; return -1; }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
    for (int i = 0; i < CSB_WINDOW_WATCHERS; i++) {
        int expected = -1;
        if (atomic_compare_exchange_strong(&csb_window_read_fds[i], &expected, fds[0])) {
            atomic_store(&csb_window_write_fds[i], fds[1]);
            return fds[0];
        }
    }
    close(fds[0]);
    close(fds[1]);
    errno = EMFILE;
    return -1;
}

void csb_window_unwatch(int fd) {
    for (int i = 0; i < CSB_WINDOW_WATCHERS; i++) {
        if (atomic_load(&csb_window_read_fds[i]) != fd) continue;
        int write_fd = atomic_exchange(&csb_window_write_fds[i], -1);
        while (atomic_load(&csb_window_in_flight) != 0) sched_yield();
        close(write_fd);
        close(fd);
        atomic_store(&csb_window_read_fds[i], -1);
        return;
    }
}

// MARK: Coordination

const short CSB_F_RDLCK = F_RDLCK;
const short CSB_F_WRLCK = F_WRLCK;
const short CSB_F_UNLCK = F_UNLCK;

int csb_ofd_lock(int fd, short type, int wait) {
    struct flock lock = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0, .l_pid = 0 };
    return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &lock);
}

int csb_rename_noreplace(int olddirfd, const char *oldname, int newdirfd, const char *newname) {
    return renameat2(olddirfd, oldname, newdirfd, newname, RENAME_NOREPLACE);
}

int csb_open_regular(int dirfd, const char *name, int flags, unsigned int mode) {
    // Look before opening: opening a device or a FIFO can have effects of its own.
    struct stat before;
    if (fstatat(dirfd, name, &before, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(before.st_mode)) { errno = ELOOP; return -1; }
        if (!S_ISREG(before.st_mode)) { errno = EINVAL; return -1; }
    } else if (errno != ENOENT || !(flags & O_CREAT)) {
        return -1;
    }
    int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0) return -1;
    struct stat st;
    int status_ok = fstat(fd, &st) == 0;
    if (!status_ok || !S_ISREG(st.st_mode)) {
        int saved = status_ok ? EINVAL : errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int status = fcntl(fd, F_GETFL);
    if (status < 0 || fcntl(fd, F_SETFL, status & ~O_NONBLOCK) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

// MARK: Arguments

static int csb_argc;
static char *const *csb_argv;

// glibc calls ELF constructors with (argc, argv, envp).
__attribute__((constructor)) static void csb_save_arguments(int argc, char **argv, char **envp) {
    (void)envp;
    csb_argc = argc;
    csb_argv = argv;
}

int csb_saved_argc(void) { return csb_argc; }
char *const *csb_saved_argv(void) { return csb_argv; }

struct csb_loaded_visit { void (*visit)(const char *, void *); void *context; };

static int csb_loaded_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct csb_loaded_visit *visit = data;
    if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') visit->visit(info->dlpi_name, visit->context);
    return 0;
}

void csb_loaded_objects(void (*visit)(const char *path, void *context), void *context) {
    struct csb_loaded_visit state = { visit, context };
    dl_iterate_phdr(csb_loaded_object, &state);
}

// A no-op chmod (the mode each already has), with whatever capabilities the
// caller holds: a kernel that lets it through lets the inode's owner through.
int csb_refuses_noop_chmod(int fd) {
    if (fd < 0) return 0;
    struct stat status;
    int refused = fstat(fd, &status) == 0 && fchmod(fd, status.st_mode & 07777) != 0
                  && (errno == EOPNOTSUPP || errno == EPERM);
    close(fd);
    return refused;
}

int csb_internal_inodes_refuse_setattr(void) {
    return csb_refuses_noop_chmod(eventfd(0, EFD_CLOEXEC)) && csb_refuses_noop_chmod(csb_pidfd_open(getpid()));
}

const int CSB_O_PATH = O_PATH;
