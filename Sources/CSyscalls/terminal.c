// The terminal relay: ptys, window sizes, a SIGWINCH watch.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

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
