// The confined child: everything between fork and exec. Only
// async-signal-safe calls and raw syscalls here; the parent prepared
// every byte of memory we read. A failure goes back through the report
// socket as (stage, errno) and the child exits with 127.
#define _GNU_SOURCE 1
#include "csandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

struct csb_report { int stage; int error; };

static void csb_report_send(int fd, int stage, int error, int passed_fd) {
    struct csb_report report = { .stage = stage, .error = error };
    struct iovec iov = { .iov_base = &report, .iov_len = sizeof(report) };
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (passed_fd >= 0) {
        memset(&control, 0, sizeof(control));
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof(control.buf);
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &passed_fd, sizeof(int));
    }
    while (sendmsg(fd, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {}
}

__attribute__((noreturn)) static void csb_child_fail(int report_fd, int stage) {
    csb_report_send(report_fd, stage, errno, -1);
    _exit(127);
}

// Moves the parent's chosen fds onto 0, 1, 2 without clobbering a source
// that is itself 0, 1 or 2: first copy every source above the range.
static int csb_child_bind_stdio(const int stdio[3]) {
    int copies[3];
    for (int i = 0; i < 3; i++) {
        copies[i] = fcntl(stdio[i], F_DUPFD_CLOEXEC, 3);
        if (copies[i] < 0) return -1;
    }
    for (int i = 0; i < 3; i++) {
        if (dup2(copies[i], i) < 0) return -1;  // dup2 clears close-on-exec
    }
    return 0;
}

static void csb_child(const struct csb_child_plan *plan, int report_fd, pid_t parent) {
    // Signals: default dispositions, empty mask (the parent blocked all).
    for (int signo = 1; signo < NSIG; signo++) {
        if (signo == SIGKILL || signo == SIGSTOP) continue;
        if (signal(signo, SIG_DFL) == SIG_ERR && errno != EINVAL) csb_child_fail(report_fd, CSB_STAGE_SIGNALS);
    }
    sigset_t empty;
    sigemptyset(&empty);
    if (sigprocmask(SIG_SETMASK, &empty, NULL) != 0) csb_child_fail(report_fd, CSB_STAGE_SIGNALS);

    if (plan->die_with_parent) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) csb_child_fail(report_fd, CSB_STAGE_PARENT_DEATH);
        if (getppid() != parent) { errno = ESRCH; csb_child_fail(report_fd, CSB_STAGE_PARENT_DEATH); }
    }
    // A new session: no controlling terminal to inject keystrokes into.
    if (plan->new_session && setsid() < 0) csb_child_fail(report_fd, CSB_STAGE_SESSION);

    if (csb_child_bind_stdio(plan->stdio) != 0) csb_child_fail(report_fd, CSB_STAGE_STDIO);
    // Every other fd closes at exec, except those the user asked to keep.
    if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) csb_child_fail(report_fd, CSB_STAGE_FDS);
    for (int i = 0; i < plan->kept_fds_count; i++) {
        if (fcntl(plan->kept_fds[i], F_SETFD, 0) != 0) csb_child_fail(report_fd, CSB_STAGE_FDS);
    }
    if (plan->working_directory_fd >= 0) {
        if (fchdir(plan->working_directory_fd) != 0) csb_child_fail(report_fd, CSB_STAGE_CHDIR);
    } else if (plan->working_directory != NULL && chdir(plan->working_directory) != 0) {
        csb_child_fail(report_fd, CSB_STAGE_CHDIR);
    }

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) csb_child_fail(report_fd, CSB_STAGE_NO_NEW_PRIVS);

    if (plan->drop_capabilities) {
        // Lock root out of regaining capabilities at exec, then empty the
        // bounding set; both need CAP_SETPCAP, so they come first.
        int bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
                   SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) csb_child_fail(report_fd, CSB_STAGE_CAPABILITIES);
        for (int cap = 0; cap <= plan->last_capability; cap++) {
            if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) csb_child_fail(report_fd, CSB_STAGE_CAPABILITIES);
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) csb_child_fail(report_fd, CSB_STAGE_CAPABILITIES);
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof(data));
    if (syscall(SYS_capset, &header, data) != 0) csb_child_fail(report_fd, CSB_STAGE_CAPABILITIES);

    if (plan->ruleset_fd >= 0) {
        if (syscall(SYS_landlock_restrict_self, plan->ruleset_fd, plan->restrict_flags) != 0) {
            csb_child_fail(report_fd, CSB_STAGE_LANDLOCK);
        }
    }

    // seccomp last: from here on only the filter's allowed calls work.
    if (plan->seccomp_guard != NULL) {
        struct sock_fprog guard = {
            .len = plan->seccomp_guard_length,
            .filter = (struct sock_filter *)plan->seccomp_guard,
        };
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &guard) != 0) csb_child_fail(report_fd, CSB_STAGE_SECCOMP);
    }
    if (plan->seccomp_filter != NULL) {
        struct sock_fprog prog = {
            .len = plan->seccomp_filter_length,
            .filter = (struct sock_filter *)plan->seccomp_filter,
        };
        unsigned int flags = plan->seccomp_listener ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
        long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
        if (listener < 0) csb_child_fail(report_fd, CSB_STAGE_SECCOMP);
        if (plan->seccomp_listener) {
            csb_report_send(report_fd, CSB_STAGE_LISTENER, 0, (int)listener);
            close((int)listener);  // the parent holds its own copy now
        }
    }

    execve(plan->path, plan->argv, plan->envp);
    csb_child_fail(report_fd, CSB_STAGE_EXEC);
}

struct csb_child_args {
    const struct csb_child_plan *plan;
    int report_fd;
    int sibling_fd;
    pid_t parent;
};

static int csb_child_entry(void *opaque) {
    const struct csb_child_args *args = opaque;
    close(args->sibling_fd);
    csb_child(args->plan, args->report_fd, args->parent);
    _exit(127);  // not reached: csb_child execs or exits
}

int csb_spawn_confined(const struct csb_child_plan *plan, pid_t *pid, int *pidfd, int *report_fd) {
    int sockets[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) return -1;

    // Block every signal so no handler of ours runs in the child before
    // it resets them; the parent restores its mask right after fork.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    // clone(CLONE_VM | CLONE_VFORK), as glibc's posix_spawn does: the child
    // borrows our memory instead of copying the page tables of a large
    // process, and we sleep until it execs or exits. It writes nothing of
    // ours but errno, and has a copy of our fd table and signal handlers.
    struct csb_child_args args = { .plan = plan, .report_fd = sockets[1], .sibling_fd = sockets[0], .parent = getpid() };
    const size_t stack_size = 128 * 1024;
    void *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    pid_t child = -1;
    if (stack != MAP_FAILED) {
        child = clone(csb_child_entry, (char *)stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
    }
    int saved = errno;
    if (stack != MAP_FAILED) munmap(stack, stack_size);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(sockets[1]);
    if (child < 0) {
        close(sockets[0]);
        errno = saved;
        return -1;
    }
    int fd = csb_pidfd_open(child);
    if (fd < 0) {
        saved = errno;
        kill(child, SIGKILL);
        close(sockets[0]);
        errno = saved;
        return -1;  // the zombie is reaped by whoever waits for any child
    }
    *pid = child;
    *pidfd = fd;
    *report_fd = sockets[0];
    return 0;
}

int csb_child_report(int report_fd, int *stage, int *error, int *received_fd) {
    struct csb_report report;
    struct iovec iov = { .iov_base = &report, .iov_len = sizeof(report) };
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof(control.buf);
    *received_fd = -1;
    ssize_t n;
    do { n = recvmsg(report_fd, &msg, MSG_CMSG_CLOEXEC); } while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    if (n == 0) return 0;
    if ((size_t)n != sizeof(report)) { errno = EPROTO; return -1; }
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) memcpy(received_fd, CMSG_DATA(cmsg), sizeof(int));
    }
    *stage = report.stage;
    *error = report.error;
    return 1;
}
