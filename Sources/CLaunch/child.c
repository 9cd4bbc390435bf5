// The confined child: everything between fork and exec. Only
// async-signal-safe calls and raw syscalls here; the parent prepared
// every byte of memory we read. A failure goes back through the report
// socket as (stage, errno) and the child exits with 127. The keeper, which
// clones the child and ends every process it starts, is in keeper.c.
#define _GNU_SOURCE 1
#include "internal.h"

ssize_t csb_send_with_fd(int fd, const void *bytes, size_t length, int passed_fd) {
    struct iovec iov = { .iov_base = (void *)bytes, .iov_len = length };
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
    ssize_t sent;
    do { sent = sendmsg(fd, &msg, MSG_NOSIGNAL); } while (sent < 0 && errno == EINTR);
    return sent;
}

void csb_report_send(int fd, int stage, int error, int value, int passed_fd) {
    struct csb_report report = { .stage = stage, .error = error, .value = value };
    (void)csb_send_with_fd(fd, &report, sizeof(report), passed_fd);
}

__attribute__((noreturn)) static void csb_child_fail(int report_fd, int stage) {
    csb_report_send(report_fd, stage, errno, 0, -1);
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
    // Signals: the keeper set every disposition to the default before it
    // cloned us (a copy of its table, not shared), so only the mask, which
    // it keeps full, is emptied here.
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
    // Under read-only mounts no descriptor may stay on a mount of the host's,
    // where chmod("/proc/self/fd/0") would change the host's device node.
    for (int i = 0; i < 3; i++) {
        if (plan->stdio_reopen[i] == NULL) continue;
        int flags = fcntl(i, F_GETFL);
        int fd = flags < 0 ? -1 : open(plan->stdio_reopen[i], (flags & O_ACCMODE) | O_NOCTTY | O_CLOEXEC);
        struct stat was, now;
        if (fd < 0 || fstat(i, &was) != 0 || fstat(fd, &now) != 0) csb_child_fail(report_fd, CSB_STAGE_REOPEN);
        if (!S_ISCHR(was.st_mode) || !S_ISCHR(now.st_mode) || was.st_rdev != now.st_rdev) {
            errno = ESTALE;
            csb_child_fail(report_fd, CSB_STAGE_REOPEN);
        }
        if (dup2(fd, i) < 0) csb_child_fail(report_fd, CSB_STAGE_REOPEN);
        close(fd);
    }
    // The relay's pty becomes the new session's terminal, so that job
    // control and /dev/tty work inside; the user's terminal is never ours.
    if (plan->controlling_terminal >= 0 && ioctl(plan->controlling_terminal, TIOCSCTTY, 0) != 0) {
        csb_child_fail(report_fd, CSB_STAGE_TERMINAL);
    }
    // Every other fd closes at exec, except those the user asked to keep.
    if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) csb_child_fail(report_fd, CSB_STAGE_FDS);
    for (int i = 0; i < plan->kept_fds_count; i++) {
        if (fcntl(plan->kept_fds[i], F_SETFD, 0) != 0) csb_child_fail(report_fd, CSB_STAGE_FDS);
    }
    if (plan->working_directory_fd >= 0) {
        if (fchdir(plan->working_directory_fd) != 0) csb_child_fail(report_fd, CSB_STAGE_CHDIR);
        if (plan->reenter_working_directory) {
            // The fd's mount belongs to the launcher's namespace, where
            // getcwd() cannot find it from our root: enter the same folder
            // by name in ours, and only if it is still that very inode.
            struct stat verified, entered;
            if (fstat(plan->working_directory_fd, &verified) != 0 || chdir(plan->working_directory) != 0
                || stat(".", &entered) != 0) {
                csb_child_fail(report_fd, CSB_STAGE_CHDIR);
            }
            if (verified.st_dev != entered.st_dev || verified.st_ino != entered.st_ino) {
                errno = ESTALE;
                csb_child_fail(report_fd, CSB_STAGE_CHDIR);
            }
        }
    } else if (plan->working_directory != NULL && chdir(plan->working_directory) != 0) {
        csb_child_fail(report_fd, CSB_STAGE_CHDIR);
    }

    // The policy's resource limits, hard too, so the command cannot raise them.
    for (int i = 0; i < plan->rlimits_count; i++) {
        struct rlimit limit;
        if (getrlimit(plan->rlimits[i].resource, &limit) != 0) csb_child_fail(report_fd, CSB_STAGE_LIMITS);
        rlim_t value = plan->rlimits[i].value < limit.rlim_max ? (rlim_t)plan->rlimits[i].value : limit.rlim_max;
        limit.rlim_cur = value;
        limit.rlim_max = value;
        if (setrlimit(plan->rlimits[i].resource, &limit) != 0) csb_child_fail(report_fd, CSB_STAGE_LIMITS);
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

    for (int i = 0; i < plan->refer_rulesets_count; i++) {
        if (syscall(SYS_landlock_restrict_self, plan->refer_rulesets[i], plan->restrict_flags) != 0) {
            csb_child_fail(report_fd, CSB_STAGE_LANDLOCK);
        }
    }
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
            csb_report_send(report_fd, CSB_STAGE_LISTENER, 0, 0, (int)listener);
            close((int)listener);  // the parent holds its own copy now
        }
    }

    execve(plan->path, plan->argv, plan->envp);
    csb_child_fail(report_fd, CSB_STAGE_EXEC);
}


struct csb_child_args {
    const struct csb_child_plan *plan;
    int report_fd;
    pid_t parent;
};

static int csb_child_entry(void *opaque) {
    const struct csb_child_args *args = opaque;
    csb_child(args->plan, args->report_fd, args->parent);
    _exit(127);  // not reached: csb_child execs or exits
}

// clone(CLONE_VM | CLONE_VFORK), as glibc's posix_spawn does: the child
// borrows the keeper's memory, and the keeper sleeps until it execs or
// exits. The child writes nothing of ours but errno, and has a copy of our
// fd table and signal handlers. The caller has blocked every signal.
pid_t csb_clone_child(const struct csb_child_plan *plan, int report_fd) {
    struct csb_child_args args = { .plan = plan, .report_fd = report_fd, .parent = getpid() };
    const size_t stack_size = 128 * 1024;
    void *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return -1;
    pid_t child = clone(csb_child_entry, (char *)stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
    int saved = errno;
    munmap(stack, stack_size);
    errno = saved;
    return child;
}

