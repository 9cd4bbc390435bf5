// The keeper: pid 1 of the sandbox's namespaces (when it gets them), a
// child subreaper that starts the confined child (child.c) and ends every
// process the command started. It runs only async-signal-safe C: it is a
// fork of the launcher, which may be large and threaded.
#define _GNU_SOURCE 1
#include "internal.h"

// MARK: The keeper
//
// A plain fork of the launcher that runs only this C: it is a child
// subreaper, so every orphan of the command's tree becomes its child, and
// (Landlock ABI 6) it sits in a domain that scopes signals, one level above
// the command's own domain. From there kill(-1, SIGKILL) reaches exactly the
// keeper's domain and the domains nested in it: the command's processes,
// wherever they moved, and never a host process, whatever the launcher's
// uid or capabilities. The command, one level down, cannot signal the keeper.

static const int csb_relayed_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };

// rt_sigaction(2)'s own struct. glibc's sigaction refuses the two signals
// it keeps for itself (32 and 33) with EINVAL, so a disposition of SIG_IGN
// that the launcher inherited for them would reach the command through it.
struct csb_kernel_sigaction {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};
_Static_assert(sizeof(struct csb_kernel_sigaction) == 32, "the kernel's struct sigaction (x86-64, arm64)");
enum { CSB_KERNEL_SIGNALS = 64 };

static int csb_default_disposition(int signo) {
    struct csb_kernel_sigaction action;
    memset(&action, 0, sizeof(action));
    action.handler = SIG_DFL;
    return (int)syscall(SYS_rt_sigaction, signo, &action, NULL, sizeof(action.mask));
}

__attribute__((noreturn)) static void csb_keeper_fail(int report_fd, int message) {
    csb_report_send(report_fd, message, errno, 0, -1);
    _exit(127);
}

// Closes every fd but two: the launcher's other fds (say, another launch's
// report socket, whose end of file must not wait for us) and the command's
// stdio, so the relay's pty sees end of file when the command's side closes.
static void csb_close_all_but(int a, int b) {
    int low = a < b ? a : b, high = a < b ? b : a;
    if (low > 0) syscall(SYS_close_range, 0, low - 1, 0);
    if (high > low + 1) syscall(SYS_close_range, low + 1, high - 1, 0);
    syscall(SYS_close_range, high + 1, ~0U, 0);
}

// Landlock: kill the whole domain, reap, repeat until no child is left. As a
// subreaper the keeper inherits every orphan, so ECHILD means that no
// process of the command is left, zombies included. A process forked while
// kill(-1) runs is either seen by it or born with the SIGKILL pending.
static void csb_keeper_kill_domain(void) {
    for (;;) {
        kill(-1, SIGKILL);
        if (waitpid(-1, NULL, __WALL) < 0 && errno != EINTR) return;  // ECHILD: done
        while (waitpid(-1, NULL, __WALL | WNOHANG) > 0) {}
    }
}

// Parses the ppid out of /proc/PID/stat: "pid (comm) S ppid ...", where
// comm may hold anything, so we look after its last ')'.
static pid_t csb_proc_parent(const char *pid_name) {
    char path[64] = "/proc/";
    size_t n = 6;
    for (const char *c = pid_name; *c && n < 40; c++) path[n++] = *c;
    memcpy(path + n, "/stat", 6);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[512];
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) return -1;
    buf[len] = 0;
    char *close_paren = NULL;
    for (char *c = buf; *c; c++) if (*c == ')') close_paren = c;
    if (close_paren == NULL || close_paren[1] != ' ' || close_paren[2] == 0 || close_paren[3] != ' ') return -1;
    pid_t ppid = 0;
    for (char *c = close_paren + 4; *c >= '0' && *c <= '9'; c++) ppid = ppid * 10 + (*c - '0');
    return ppid;
}

struct csb_dirent64 {  // getdents64's record (glibc's readdir allocates)
    uint64_t ino;
    int64_t off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

// Sends SIGKILL to every child of ours listed in /proc. A child's pid cannot
// be reused before we reap it, so the kill cannot reach another process.
// Returns how many were signalled, -1 when /proc cannot be read.
static int csb_kill_listed_children(void) {
    int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return -1;
    pid_t self = getpid();
    int killed = 0;
    char buf[4096];
    long n;
    while ((n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
        for (long offset = 0; offset < n;) {
            const struct csb_dirent64 *entry = (const void *)(buf + offset);
            offset += entry->reclen;
            if (entry->name[0] < '1' || entry->name[0] > '9') continue;
            if (csb_proc_parent(entry->name) != self) continue;
            pid_t pid = 0;
            for (const char *c = entry->name; *c; c++) pid = pid * 10 + (*c - '0');
            if (kill(pid, SIGKILL) == 0) killed++;
        }
    }
    close(dir);
    return killed;
}

// Without Landlock's signal scope or a pid namespace of our own, kill(-1)
// would reach the user's other processes. Kill the children the keeper has
// (as this /proc, the host's, names them), generation by generation (a
// killed process's orphans become ours), until none is left, or give up
// after a second of finding nothing to kill while some child still lives
// (no /proc): those processes are not killed, as the report says.
static void csb_keeper_kill_children(int signal_fd) {
    for (int idle = 0;;) {
        // Reap first: with no child left (the usual case) /proc is not read.
        pid_t reaped;
        int any = 0;
        while ((reaped = waitpid(-1, NULL, __WALL | WNOHANG)) > 0) any = 1;
        if (reaped < 0 && errno == ECHILD) return;
        int killed = csb_kill_listed_children();
        idle = (killed > 0 || any) ? 0 : idle + 1;
        if (idle >= 20) return;
        struct pollfd fd = { .fd = signal_fd, .events = POLLIN, .revents = 0 };
        poll(&fd, 1, 50);
        struct signalfd_siginfo info;
        while (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {}
    }
}

// Ends every process of the command and returns its wait status. The
// command is not reaped yet, so its pid, which is also its process group's
// id (it called setsid), is still ours to signal.
//
// kill(-1) is bounded either by the signal scope or, for pid 1 of a pid
// namespace of our own, by the namespace: it reaches only the processes the
// caller's namespace can name, itself excepted (and with no /proc needed:
// where the kernel refused the namespace's procfs, the host's /proc names
// our children by host pids, which a getpid() of 1 never matches). Without
// either, the keeper kills its children as the host's /proc lists them.
static int csb_keeper_end(const struct csb_keeper_plan *keeper, int signal_fd, pid_t command) {
    int status = 0;
    int bounded = keeper->scope_signals || getpid() == 1;
    kill(bounded ? -1 : -command, SIGKILL);
    waitpid(command, &status, __WALL);
    if (bounded) csb_keeper_kill_domain();
    else csb_keeper_kill_children(signal_fd);
    return status;
}

// MARK: The keeper's namespaces
//
// When the kernel consents, the keeper is pid 1 of new pid and mount
// namespaces: the sandbox gets a /dev/shm and a /proc of its own (POSIX
// semaphores, Python's multiprocessing, the Swift runtime's
// /proc/self/cmdline) without seeing the host's shared memory or processes.
// Landlock still decides: the new mounts get rules here, through the fds
// opened after mounting; nothing else changes.

// Decimal digits of `value` at `out`, without printf (not async-signal-safe).
size_t csb_format_u64(char *out, uint64_t value) {
    char digits[20];
    size_t count = 0;
    do { digits[count++] = (char)('0' + value % 10); value /= 10; } while (value != 0);
    for (size_t i = 0; i < count; i++) out[i] = digits[count - 1 - i];
    return count;
}

int csb_write_proc_file(const char *path, const char *text, size_t length) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t written = write(fd, text, length);
    int saved = errno;
    close(fd);
    errno = saved;
    return written == (ssize_t)length ? 0 : -1;
}

// "ID ID 1\n": the id maps to itself, and nothing else is mapped.
int csb_map_own_id(const char *path, uint64_t id) {
    char line[48];
    size_t at = csb_format_u64(line, id);
    line[at++] = ' ';
    at += csb_format_u64(line + at, id);
    memcpy(line + at, " 1\n", 3);
    return csb_write_proc_file(path, line, at + 3);
}

// A Landlock rule beneath the folder just mounted at `path` (0 when there is no ruleset).
static int csb_rule_for_mount(int ruleset_fd, const char *path, uint64_t access) {
    if (ruleset_fd < 0 || access == 0) return 0;
    int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    int result = csb_landlock_add_path_rule(ruleset_fd, fd, access);
    int saved = errno;
    close(fd);
    errno = saved;
    return result;
}

// A command run by root keeps uid 0 without capabilities, and so the owner's
// access to root-only procfs files: the host network namespace's secrets in
// /proc/sys (tcp_fastopen_key, stable_secret) and the kernel's layout at the
// top level (slabinfo, kpageflags, vmallocinfo...). /proc/sys is covered by an
// empty read-only tmpfs, and every top-level entry that others may not read by
// /dev/null. One getdents64 of /proc, no allocation: this is a forked child.
static void csb_mask_root_only_proc(void) {
    mount("tmpfs", "/proc/sys", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4k");
    int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (proc < 0) return;
    char buffer[4096];
    long count;
    while ((count = syscall(SYS_getdents64, proc, buffer, sizeof(buffer))) > 0) {
        for (long at = 0; at < count;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *entry = (void *)(buffer + at);
            at += entry->reclen;
            if (entry->type != DT_REG || entry->name[0] < 'a' || entry->name[0] > 'z') continue;  // pids, links, folders
            struct stat status;
            if (fstatat(proc, entry->name, &status, AT_SYMLINK_NOFOLLOW) != 0 || (status.st_mode & S_IROTH)) continue;
            char path[80] = "/proc/";
            size_t length = strlen(entry->name);
            if (length > sizeof(path) - 7) continue;
            memcpy(path + 6, entry->name, length + 1);
            mount("/dev/null", path, NULL, MS_BIND, NULL);
        }
    }
    close(proc);
}

// MARK: Read-only mounts
//
// Landlock does not mediate chmod, chown, utimes or xattr writes; a mount's
// read-only flag does, for every path, link or descriptor that reaches a file
// through it. So every mount of the namespace is made read-only but the
// writable folders, each a recursive bind of itself, attached on top; the
// command then makes those calls natively, and the kernel answers EROFS
// outside. The flags are the mounts' own (mount_setattr), never a superblock's:
// the host's mounts do not change. Nested writable folders need nothing more:
// the outer bind already holds the inner folder, writable.

enum { CSB_MAX_WRITABLE_MOUNTS = 256 };

static void csb_close_each(const int *fds, int count) {
    for (int i = 0; i < count; i++) if (fds[i] >= 0) close(fds[i]);
}

// 0, or -1 with errno. Nothing is half-made that the command could see: on
// failure the keeper exits before the command starts.
static int csb_make_read_only_mounts(const struct csb_keeper_plan *keeper) {
    int count = keeper->writable_count;
    if (count < 0 || count > CSB_MAX_WRITABLE_MOUNTS) { errno = E2BIG; return -1; }
    int targets[CSB_MAX_WRITABLE_MOUNTS], trees[CSB_MAX_WRITABLE_MOUNTS];
    for (int i = 0; i < count; i++) targets[i] = trees[i] = -1;
    struct stat top;
    if (stat("/", &top) != 0) return -1;
    int failed = 0;
    for (int i = 0; i < count && !failed; i++) {
        // The launcher verified the folder (or file) through its fd, in its
        // own namespace; the same name here must be that very inode (the fd
        // pins it, so its number cannot have been reused).
        struct stat verified, here;
        targets[i] = open(keeper->writable_paths[i], O_PATH | O_CLOEXEC);
        if (targets[i] < 0 || fstat(keeper->writable_fds[i], &verified) != 0 || fstat(targets[i], &here) != 0) { failed = 1; break; }
        if (verified.st_dev != here.st_dev || verified.st_ino != here.st_ino) { errno = ESTALE; failed = 1; break; }
        // A bind stacked on the namespace's root is never reached from it.
        if (here.st_dev == top.st_dev && here.st_ino == top.st_ino) { errno = EBUSY; failed = 1; break; }
        int recursive = S_ISDIR(here.st_mode) ? AT_RECURSIVE : 0;  // a file has no mounts beneath it
        trees[i] = open_tree(targets[i], "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | recursive);
        if (trees[i] < 0) failed = 1;
    }
    if (!failed) {
        struct mount_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.attr_set = MOUNT_ATTR_RDONLY;
        if (mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof(attr)) != 0) failed = 1;
    }
    for (int i = 0; i < count && !failed; i++) {
        if (move_mount(trees[i], "", targets[i], "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) failed = 1;
    }
    int saved = errno;
    csb_close_each(targets, count);
    csb_close_each(trees, count);
    errno = saved;
    return failed ? -1 : 0;
}

// nsfs inodes are global kernel objects too: this namespace's own is a safe
// place to see whether the kernel lets their owner chmod them (a no-op mode).
static int csb_nsfs_refuses_setattr(void) {
    int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;  // nothing to reach them through
    if (csb_refuses_noop_chmod(fd)) return 1;
    errno = EPERM;
    return 0;
}

// Runs first in a keeper cloned into new namespaces; returns the csb_namespaces bits.
static int csb_keeper_enter_namespaces(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper,
                                       int namespaces, int report_fd) {
    if (namespaces & CSB_NAMESPACES_USER) {
        if (csb_write_proc_file("/proc/self/setgroups", "deny", 4) != 0 && errno != ENOENT) csb_keeper_fail(report_fd, CSB_KEEPER_ID_MAP);
        if (csb_map_own_id("/proc/self/uid_map", keeper->uid) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_ID_MAP);
        if (csb_map_own_id("/proc/self/gid_map", keeper->gid) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_ID_MAP);
    }
    // Nothing mounted here may propagate back to the host's namespace.
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_MOUNT);
    // Asked while the host's /proc is still mounted here: the sandbox's own
    // comes later and reaches the same nsfs inodes.
    if (keeper->read_only_mounts && !csb_nsfs_refuses_setattr()) csb_keeper_fail(report_fd, CSB_KEEPER_READ_ONLY_MOUNTS);
    if (keeper->private_view) {
        // The network namespace made ahead, when the keeper was cloned
        // without one (csb_spawn_kept): its loopback is up already.
        int joined = 0;
        if (keeper->private_network && keeper->has_network_namespace && !(namespaces & CSB_NAMESPACES_USER)) {
            if (setns(keeper->network_namespace_fd, CLONE_NEWNET) != 0) {
                csb_report_send(report_fd, CSB_KEEPER_VIEW, errno, CSB_VIEW_FAILED_NETWORK, -1);
                _exit(127);
            }
            joined = 1;
        }
        // Every mount but /tmp, /dev/shm and the writable binds is
        // read-only in the view: what read-only mounts give the host view.
        int failure = 0, proc_mounted = 0;
        if (csb_view_build(plan, keeper, joined, report_fd, &failure, &proc_mounted) != 0) {
            csb_report_send(report_fd, CSB_KEEPER_VIEW, errno, failure, -1);
            _exit(127);
        }
        if (keeper->private_network && csb_egress_send(keeper, report_fd) != 0) {
            csb_report_send(report_fd, CSB_KEEPER_VIEW, errno, CSB_VIEW_FAILED_EGRESS, -1);
            _exit(127);
        }
        namespaces |= CSB_NAMESPACES_VIEW | (keeper->private_network ? CSB_NAMESPACES_NETWORK : 0) | (proc_mounted ? CSB_NAMESPACES_PROC : 0);
        if (keeper->read_only_mounts) namespaces |= CSB_NAMESPACES_READ_ONLY_MOUNTS;
    } else if (keeper->read_only_mounts) {
        // Before /dev/shm and /proc: the private tmpfs stays writable, and
        // the new procfs is mounted read-only below.
        if (csb_make_read_only_mounts(keeper) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_READ_ONLY_MOUNTS);
        namespaces |= CSB_NAMESPACES_READ_ONLY_MOUNTS;
    }
    // A missing /dev/shm or a refused mount only means less: the command
    // then gets no /dev/shm and no /proc, as without namespaces.
    char options[64] = "mode=1777,size=";
    size_t at = strlen(options);
    at += csb_format_u64(options + at, keeper->shm_size);
    // Empty files cost memory too: their number is bounded as well.
    memcpy(options + at, ",nr_inodes=65536", sizeof(",nr_inodes=65536"));
    if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) == 0
        && csb_rule_for_mount(plan->ruleset_fd, "/dev/shm", keeper->shm_access) == 0) {
        // Renames within it need REFER in every layer; it is a mount of its
        // own, so nothing moves between it and another folder (EXDEV).
        int refer = 1;
        for (int i = 0; i < plan->refer_rulesets_count && refer; i++) {
            refer = csb_rule_for_mount(plan->refer_rulesets[i], "/dev/shm", CSB_LANDLOCK_ACCESS_FS_REFER) == 0;
        }
        if (refer) namespaces |= CSB_NAMESPACES_SHM;
    }
    // Read-only with the rest: a root command owns /proc's global entries,
    // and chmod on one (sysrq-trigger) would change it for the whole host.
    unsigned long proc_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | (keeper->read_only_mounts ? MS_RDONLY : 0);
    if (keeper->private_view) {
        // The view mounted it already, before the host's went.
        if ((namespaces & CSB_NAMESPACES_PROC) && keeper->uid == 0) csb_mask_root_only_proc();
    } else if (mount("proc", "/proc", "proc", proc_flags, NULL) == 0
        && csb_rule_for_mount(plan->ruleset_fd, "/proc", keeper->proc_access) == 0) {
        if (keeper->uid == 0) csb_mask_root_only_proc();
        namespaces |= CSB_NAMESPACES_PROC;
    }
    return namespaces;
}

__attribute__((noreturn)) static void csb_keeper(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper, int report_fd, int namespaces) {
    // Every signal stays blocked (the launcher blocked all before fork); the
    // ones we act on arrive through a signalfd. Default dispositions, since
    // a launcher that ignores SIGCHLD would have its children auto-reaped,
    // and an ignored signal survives the command's exec. The command's child
    // is cloned with a copy of this table, so this is the only reset.
    for (int signo = 1; signo <= CSB_KERNEL_SIGNALS; signo++) {
        if (signo == SIGKILL || signo == SIGSTOP) continue;
        if (csb_default_disposition(signo) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_SIGNALS);
    }
    // A session of our own: off the user's terminal, whose signals reach the
    // launcher, which forwards them once.
    if (setsid() < 0) csb_keeper_fail(report_fd, CSB_KEEPER_SESSION);
    struct csb_child_plan child_plan = *plan;
    if (namespaces != 0) {
        namespaces = csb_keeper_enter_namespaces(plan, keeper, namespaces, report_fd);
        // Inside a user namespace of its own the child holds every
        // capability there: it must drop them all, bounding set included.
        if (namespaces & CSB_NAMESPACES_USER) child_plan.drop_capabilities = 1;
        child_plan.reenter_working_directory = child_plan.working_directory_fd >= 0 && child_plan.working_directory != NULL;
    }
    csb_report_send(report_fd, CSB_KEEPER_NAMESPACES, 0, namespaces, -1);
    if ((namespaces & CSB_NAMESPACES_VIEW) && keeper->pty_slots != 0) {
        // The command's pty comes from its own devpts, so that its ttyname
        // names it; the launcher relays the master as it would its own.
        int master = -1, terminal = -1;
        if (csb_view_pty(keeper, &master, &terminal) != 0) {
            csb_report_send(report_fd, CSB_KEEPER_VIEW, errno, CSB_VIEW_FAILED_PTY, -1);
            _exit(127);
        }
        csb_report_send(report_fd, CSB_KEEPER_PTY_MASTER, 0, 0, master);
        csb_report_send(report_fd, CSB_KEEPER_PTY_TERMINAL, 0, 0, terminal);
        close(master);
        for (int i = 0; i < 3; i++) {
            if (!(keeper->pty_slots & (1 << i))) continue;
            child_plan.stdio[i] = terminal;
            child_plan.stdio_reopen[i] = NULL;
        }
    }
    // The grant area's mounts go to the launcher, whose helper mounts there.
    if ((namespaces & CSB_NAMESPACES_VIEW) && keeper->grant_area) csb_grant_area_send(report_fd);
    prctl(PR_SET_NAME, "sandbox-keeper", 0, 0, 0);  // for ps; a failure changes nothing else
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_SUBREAPER);
    if (keeper->scope_signals) {
        // A domain that restricts nothing but signals (files and network are
        // left to the command's own, nested domain). Every Landlock domain
        // refuses reparenting (a rename or link into another folder: EXDEV)
        // unless it handles REFER and allows it on both sides, even one that
        // handles no file right: this one allows it everywhere beneath "/".
        // The rule binds to the root's inode now, so the root must be final
        // (a pivot_root comes before this). And a domain that handles any
        // file right refuses mount, move_mount and umount2 to us and every
        // process we start: every mount of the namespace is made above.
        struct csb_landlock_ruleset_attr attr = {
            .handled_access_fs = CSB_LANDLOCK_ACCESS_FS_REFER, .handled_access_net = 0, .scoped = CSB_LANDLOCK_SCOPE_SIGNAL,
        };
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_LANDLOCK);
        int ruleset = csb_landlock_create_ruleset(&attr);
        if (ruleset < 0 || csb_rule_for_mount(ruleset, "/", CSB_LANDLOCK_ACCESS_FS_REFER) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_LANDLOCK);
        if (syscall(SYS_landlock_restrict_self, ruleset, keeper->scope_restrict_flags) != 0) csb_keeper_fail(report_fd, CSB_KEEPER_LANDLOCK);
        close(ruleset);
    }
    sigset_t watched;
    sigemptyset(&watched);
    sigaddset(&watched, SIGCHLD);
    for (size_t i = 0; i < sizeof(csb_relayed_signals) / sizeof(csb_relayed_signals[0]); i++) sigaddset(&watched, csb_relayed_signals[i]);
    int signal_fd = signalfd(-1, &watched, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd < 0) csb_keeper_fail(report_fd, CSB_KEEPER_SIGNALS);

    pid_t command = csb_clone_child(&child_plan, report_fd);
    if (command < 0) csb_keeper_fail(report_fd, CSB_KEEPER_FORK);
    // The child's failure, if any, is already in the socket, ahead of this.
    csb_report_send(report_fd, CSB_KEEPER_RUNNING, 0, command, -1);
    csb_close_all_but(report_fd, signal_fd);

    int watch_launcher = 1;
    for (;;) {
        struct pollfd fds[2] = { { .fd = signal_fd, .events = POLLIN }, { .fd = report_fd, .events = POLLIN } };
        if (poll(fds, watch_launcher ? 2 : 1, -1) < 0) continue;
        if (watch_launcher && fds[1].revents != 0) {
            // The launcher sends nothing: readiness means its end closed.
            char byte;
            ssize_t got = recv(report_fd, &byte, 1, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN) || (fds[1].revents & (POLLHUP | POLLERR | POLLNVAL))) {
                if (keeper->kill_when_launcher_exits) {
                    csb_keeper_end(keeper, signal_fd, command);
                    _exit(0);
                }
                watch_launcher = 0;
            }
        }
        struct signalfd_siginfo info;
        while (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
            if (info.ssi_signo != SIGCHLD) kill(command, (int)info.ssi_signo);  // not reaped yet: still ours
        }
        // Reap the orphans that ended; look at the command without reaping
        // it (WNOWAIT), so that its pid and process group stay ours until
        // every process is killed.
        for (;;) {
            siginfo_t ended;
            memset(&ended, 0, sizeof(ended));
            if (waitid(P_ALL, 0, &ended, WEXITED | WNOHANG | WNOWAIT | __WALL) != 0 || ended.si_pid == 0) break;
            if (ended.si_pid != command) {
                waitpid(ended.si_pid, NULL, __WALL);
                continue;
            }
            int status = csb_keeper_end(keeper, signal_fd, command);
            csb_report_send(report_fd, CSB_KEEPER_EXITED, 0, status, -1);
            _exit(0);
        }
    }
}

// _Fork (glibc 2.34) skips the atfork handlers: the keeper calls nothing
// they would make safe, and the launcher may be a large, threaded process.
static pid_t csb_fork(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return _Fork();
#else
    return fork();
#endif
}

// A fork into new namespaces: clone(2) without a stack runs on a copy of
// ours, as fork does (and, like _Fork, without atfork handlers).
static pid_t csb_clone_namespaced(int flags) {
    return (pid_t)syscall(SYS_clone, (unsigned long)(flags | SIGCHLD), NULL, NULL, NULL, 0UL);
}

int csb_spawn_kept(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper,
                   pid_t *keeper_pid, int *keeper_pidfd, int *report_fd) {
    int sockets[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) return -1;
    // Block every signal so no handler of ours runs in the keeper; it keeps
    // them blocked, and we restore our mask right after fork.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = -1;
    int namespaces = 0;
    if (keeper->private_namespaces) {
        // Root needs no user namespace; anyone else may be refused one
        // (Ubuntu's AppArmor, a sysctl): then the keeper is a plain fork.
        // A network namespace made ahead belongs to the launcher's user
        // namespace: the keeper joins it there, and clones a new one in a
        // user namespace of its own.
        int network = keeper->private_view && keeper->private_network ? CLONE_NEWNET : 0;
        if (geteuid() == 0) {
            pid = csb_clone_namespaced(CLONE_NEWNS | CLONE_NEWPID | (keeper->has_network_namespace ? 0 : network));
            if (pid >= 0) namespaces = CSB_NAMESPACES_PID_MOUNT;
        }
        if (pid < 0 && keeper->user_namespace_allowed) {
            pid = csb_clone_namespaced(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUSER | network);
            if (pid >= 0) namespaces = CSB_NAMESPACES_PID_MOUNT | CSB_NAMESPACES_USER;
        }
    }
    if (pid < 0 && (keeper->read_only_mounts || keeper->private_view)) {
        // The filter lets metadata calls through only for read-only mounts,
        // and the private view is the namespaces' or nothing.
        int refused = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        close(sockets[0]);
        close(sockets[1]);
        errno = refused;
        return CSB_SPAWN_NO_NAMESPACES;
    }
    if (pid < 0) pid = csb_fork();
    if (pid == 0) {
        close(sockets[0]);  // only the launcher may hold this end: its closing is the keeper's cue
        csb_keeper(plan, keeper, sockets[1], namespaces);
    }
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(sockets[1]);
    if (pid < 0) {
        close(sockets[0]);
        errno = saved;
        return -1;
    }
    int fd = csb_pidfd_open(pid);
    if (fd < 0) {
        saved = errno;
        kill(pid, SIGKILL);  // the command, if started, dies with it (PR_SET_PDEATHSIG)
        waitpid(pid, NULL, 0);
        close(sockets[0]);
        errno = saved;
        return -1;
    }
    *keeper_pid = pid;
    *keeper_pidfd = fd;
    *report_fd = sockets[0];
    return 0;
}

int csb_child_report(int report_fd, int *stage, int *error, int *value, int *received_fd) {
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
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) memcpy(received_fd, CMSG_DATA(cmsg), sizeof(int));
    }
    if ((size_t)n != sizeof(report)) {
        if (*received_fd >= 0) close(*received_fd);
        *received_fd = -1;
        errno = EPROTO;
        return -1;
    }
    *stage = report.stage;
    *error = report.error;
    *value = report.value;
    return 1;
}

