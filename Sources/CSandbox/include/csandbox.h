// C shim for what Swift cannot reach: raw and variadic syscalls, kernel
// structs newer than Debian's headers, and the code between fork and exec.
// Every function returns -1 and sets errno on failure, like libc.
#ifndef CSANDBOX_H
#define CSANDBOX_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

// MARK: Landlock (copied from linux/landlock.h, ABI 7; Debian's stops at ABI 2)

struct csb_landlock_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;  // ABI 4
    uint64_t scoped;              // ABI 6
};

static const uint64_t CSB_LANDLOCK_ACCESS_FS_EXECUTE = 1ULL << 0;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_WRITE_FILE = 1ULL << 1;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_READ_FILE = 1ULL << 2;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_READ_DIR = 1ULL << 3;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_REMOVE_DIR = 1ULL << 4;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_REMOVE_FILE = 1ULL << 5;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_MAKE_CHAR = 1ULL << 6;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_MAKE_DIR = 1ULL << 7;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_MAKE_REG = 1ULL << 8;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_MAKE_SOCK = 1ULL << 9;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_MAKE_FIFO = 1ULL << 10;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_MAKE_BLOCK = 1ULL << 11;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_MAKE_SYM = 1ULL << 12;
static const uint64_t CSB_LANDLOCK_ACCESS_FS_REFER = 1ULL << 13;      // ABI 2
static const uint64_t CSB_LANDLOCK_ACCESS_FS_TRUNCATE = 1ULL << 14;   // ABI 3
static const uint64_t CSB_LANDLOCK_ACCESS_FS_IOCTL_DEV = 1ULL << 15;  // ABI 5
static const uint64_t CSB_LANDLOCK_ACCESS_NET_BIND_TCP = 1ULL << 0;   // ABI 4
static const uint64_t CSB_LANDLOCK_ACCESS_NET_CONNECT_TCP = 1ULL << 1;
static const uint64_t CSB_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1ULL << 0;  // ABI 6
static const uint64_t CSB_LANDLOCK_SCOPE_SIGNAL = 1ULL << 1;
static const uint32_t CSB_LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON = 1U << 1;  // ABI 7

/// The highest Landlock ABI the kernel offers, 0 when Landlock is off or
/// absent (errno tells which: ENOSYS or EOPNOTSUPP).
/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`
int csb_landlock_abi_version(void);
/// `landlock_create_ruleset(2)`: returns a ruleset fd (close-on-exec).
int csb_landlock_create_ruleset(const struct csb_landlock_ruleset_attr *attr);
/// `landlock_add_rule(2)` with `LANDLOCK_RULE_PATH_BENEATH`.
int csb_landlock_add_path_rule(int ruleset_fd, int parent_fd, uint64_t allowed_access);
/// `landlock_add_rule(2)` with `LANDLOCK_RULE_NET_PORT`.
int csb_landlock_add_port_rule(int ruleset_fd, uint64_t port, uint64_t allowed_access);

// MARK: Files

static const int CSB_AT_EMPTY_PATH = 0x1000;  // hidden by Glibc's Swift module


/// `openat(2)` with `O_PATH | O_CLOEXEC` (Glibc hides O_PATH from Swift).
int csb_open_path(int dirfd, const char *path, int follow_symlinks);
/// `openat2(2)` with `O_PATH | O_CLOEXEC` and `RESOLVE_NO_MAGICLINKS`.
int csb_openat2_path(int dirfd, const char *path, int follow_symlinks);
/// The same with `RESOLVE_IN_ROOT`: `root` is "/" for the path and for every
/// absolute link met on the way (the child's root, in its own mount namespace).
int csb_openat2_path_in_root(int root, const char *path, int follow_symlinks);
/// The same with `RESOLVE_BENEATH`: EXDEV when the walk would leave `dirfd`
/// (an absolute link, or ".." above it).
int csb_openat2_path_beneath(int dirfd, const char *path, int follow_symlinks);
/// `fchmodat(2)` through `/proc/self/fd/N`, which reaches the inode of an O_PATH fd.
int csb_chmod_fd(int fd, uint32_t mode);
/// `fchownat(2)` with `AT_EMPTY_PATH`.
int csb_chown_fd(int fd, uint32_t uid, uint32_t gid);
/// `utimensat(2)` with `AT_EMPTY_PATH`; `times` may be NULL (now).
int csb_utimens_fd(int fd, const int64_t *times_sec_nsec);
/// `setxattr(2)` / `removexattr(2)` through `/proc/self/fd/N`.
int csb_setxattr_fd(int fd, const char *name, const void *value, size_t size, int flags);
int csb_removexattr_fd(int fd, const char *name);
/// `posix_openpt(3)` and the matching terminal, both close-on-exec (hidden from Swift by Glibc).
int csb_open_pty(int *master, int *terminal);
/// `memfd_create(2)` (hidden from Swift by Glibc).
int csb_memfd_create(const char *name);

// MARK: File identity

/// `struct file_handle` with room for the largest handle (MAX_HANDLE_SZ).
struct csb_file_handle {
    uint32_t handle_bytes;
    int32_t handle_type;
    unsigned char f_handle[128];
};
/// `name_to_handle_at(fd, "", ..., AT_EMPTY_PATH)`; on filesystems that
/// refuse plain handles (overlayfs) retries with `AT_HANDLE_FID` and sets
/// `*is_fid`. Such a handle identifies but cannot be opened.
int csb_name_to_handle(int fd, struct csb_file_handle *handle, int *mount_id, int *is_fid);
/// `open_by_handle_at(mount_fd, handle, O_PATH | O_DIRECTORY)`: needs CAP_DAC_READ_SEARCH.
int csb_open_by_handle(int mount_fd, struct csb_file_handle *handle);
/// `fstatfs(2)`: the filesystem's f_fsid and f_type (hidden from Swift by Glibc).
int csb_filesystem_identity(int fd, uint64_t *fsid, uint64_t *type);
/// O_PATH, which Glibc hides from Swift.
extern const int CSB_O_PATH;
/// `statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID)`: the id of the mount `fd`
/// is on (Linux 5.8), as /proc/PID/mountinfo numbers it.
int csb_mount_id(int fd, uint64_t *mount_id);
/// `statx(fd, "", AT_EMPTY_PATH, STATX_BTIME)`: 0 with the birth time, or
/// -1 with ENODATA when the filesystem does not keep one.
int csb_birth_time(int fd, int64_t *seconds, uint32_t *nanoseconds);
/// `statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID)`: the mount `fd` is on, and
/// whether it is that mount's root (`*is_mount_root` is -1 when the kernel
/// does not say). `*device` is st_dev as `stat` gives it.
int csb_mount_facts(int fd, uint64_t *mount_id, int *is_mount_root, uint64_t *device, uint64_t *inode);

// MARK: Processes

/// `pidfd_open(2)`.
int csb_pidfd_open(pid_t pid);
/// `pidfd_open(tid, PIDFD_THREAD)` then `pidfd_getfd(2)`: a copy of a thread's fd.
int csb_copy_fd_of_thread(pid_t tid, int fd);
/// `major(3)`, a macro Swift does not import.
unsigned int csb_device_major(uint64_t device);
/// The device and inode of the folder `levels` (1...1024) above the folder `dirfd`.
int csb_ancestor_identity(int dirfd, int levels, uint64_t *device, uint64_t *inode);
/// An O_PATH descriptor of that folder.
int csb_open_ancestor(int dirfd, int levels);
/// `inotify_add_watch(2)` on the inode an O_PATH fd holds, through `/proc/self/fd/N`.
int csb_inotify_watch_fd(int inotify_fd, int target_fd, uint32_t mask);
/// `waitid(P_PIDFD, ...)`: returns 0 and the wait status encoded as by wait(2).
int csb_pidfd_wait(int pidfd, int *status);
/// `process_vm_readv(2)` of one buffer.
ssize_t csb_read_process_memory(pid_t pid, uint64_t address, void *buffer, size_t length);
/// `capget(2)`/`capset(2)` on the calling thread only: clears or restores the
/// effective set, so the supervisor acts with the confined child's powers.
int csb_thread_effective_caps_clear(uint32_t saved[6]);
int csb_thread_effective_caps_restore(const uint32_t saved[6]);
/// Forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to `pid`
/// from an async-signal-safe handler. `pid` 0 catches and holds the last
/// signal until a later call names the pid; -1 restores the defaults.
int csb_forward_signals_to(pid_t pid);

// MARK: seccomp user notification (copied from linux/seccomp.h)

struct csb_seccomp_data {
    int32_t nr;
    uint32_t arch;
    uint64_t instruction_pointer;
    uint64_t args[6];
};
struct csb_seccomp_notif {
    uint64_t id;
    uint32_t pid;
    uint32_t flags;
    struct csb_seccomp_data data;
};
struct csb_seccomp_notif_resp {
    uint64_t id;
    int64_t val;
    int32_t error;
    uint32_t flags;
};
/// `prctl(PR_GET_SECCOMP)`: 0 when this kernel has seccomp.
int csb_seccomp_supported(void);
/// `seccomp(SECCOMP_GET_NOTIF_SIZES)`: 0 when user notification works.
int csb_seccomp_notify_supported(void);
/// `ioctl(SECCOMP_IOCTL_NOTIF_RECV)`; `buffer` holds the kernel's notif size.
int csb_seccomp_notify_receive(int listener, struct csb_seccomp_notif *notif);
/// `ioctl(SECCOMP_IOCTL_NOTIF_ID_VALID)`: 0 while the request is still pending.
int csb_seccomp_notify_id_valid(int listener, uint64_t id);
/// `ioctl(SECCOMP_IOCTL_NOTIF_SEND)`.
int csb_seccomp_notify_respond(int listener, const struct csb_seccomp_notif_resp *resp);

// MARK: The supervisor: attribute reads and the child's memory

/// `getxattr(2)` / `listxattr(2)` through `/proc/self/fd/N`, which reaches
/// the inode of an O_PATH fd (a symlink's own, when the fd holds one):
/// `fgetxattr` refuses O_PATH fds with EBADF.
ssize_t csb_getxattr_fd(int fd, const char *name, void *value, size_t size);
ssize_t csb_listxattr_fd(int fd, char *list, size_t size);
/// `ioctl(SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)`
/// (Linux 6.6): the child and the supervisor hand each request over on
/// one CPU, which shortens every round trip. EINVAL/ENOTTY on older kernels.
int csb_seccomp_notify_sync_wakeup(int listener);

// MARK: The confined child

/// What the child does between fork and exec, all prepared by the parent.
struct csb_child_plan {
    const char *path;              // absolute path to execve
    char *const *argv;
    char *const *envp;
    const char *working_directory;
    int working_directory_fd;      // fchdir here when >= 0: the folder the parent verified
    int reenter_working_directory; // then chdir(working_directory) and check it is that folder (set by a keeper in a new mount namespace)
    int stdio[3];                  // fds to become 0, 1, 2
    const int *kept_fds;           // extra fds that survive exec, unchanged
    int kept_fds_count;
    int ruleset_fd;                // Landlock ruleset, or -1 for none
    uint32_t restrict_flags;       // landlock_restrict_self flags
    /// Layers entered before `ruleset_fd`, with the same flags: each handles
    /// only REFER and IOCTL_DEV, and keeps files of other folders out of one
    /// writable folder (see `ReparentingLayers`). The keeper adds its
    /// private /dev/shm to each, as to `ruleset_fd`.
    const int *refer_rulesets;
    int refer_rulesets_count;
    const void *seccomp_filter;    // struct sock_filter[], or NULL
    unsigned short seccomp_filter_length;
    const void *seccomp_guard;     // a second filter loaded before it, or NULL
    unsigned short seccomp_guard_length;
    int seccomp_listener;          // ask for a user-notification listener
    int drop_capabilities;         // bounding, ambient, securebits: needs CAP_SETPCAP
    int last_capability;
    int new_session;
    int die_with_parent;
    int controlling_terminal;      // 0, 1 or 2: make that fd (a terminal) the session's controlling terminal; -1: none
    /// For each of 0, 1, 2: NULL, or the path of the character device it is,
    /// opened again by that name in the keeper's mount namespace (and checked
    /// to be the same device) when the keeper made its mounts read-only, so
    /// that no descriptor of the command is on a mount of the host's.
    const char *stdio_reopen[3];
    /// Resource limits to set, soft and hard, before exec (never raised:
    /// each is lowered to the smaller of its value and the current hard limit).
    const struct csb_rlimit *rlimits;
    int rlimits_count;
};

struct csb_rlimit {
    int resource;   // RLIMIT_*
    uint64_t value;
};

/// Where the child failed, sent back through the report socket.
enum csb_child_stage {
    CSB_STAGE_SIGNALS = 1, CSB_STAGE_PARENT_DEATH, CSB_STAGE_SESSION, CSB_STAGE_STDIO,
    CSB_STAGE_FDS, CSB_STAGE_CHDIR, CSB_STAGE_NO_NEW_PRIVS, CSB_STAGE_CAPABILITIES,
    CSB_STAGE_LANDLOCK, CSB_STAGE_SECCOMP, CSB_STAGE_LISTENER, CSB_STAGE_EXEC, CSB_STAGE_TERMINAL,
    CSB_STAGE_REOPEN, CSB_STAGE_LIMITS
};

// MARK: The keeper: a command's processes end with it

/// What the keeper does besides starting the confined child.
struct csb_keeper_plan {
    /// Enter a Landlock domain that scopes only signals (ABI 6), so that the
    /// keeper's `kill(-1, SIGKILL)` reaches the command's processes and no
    /// others, and the command cannot signal the keeper.
    int scope_signals;
    uint32_t scope_restrict_flags;  // landlock_restrict_self flags for that domain
    /// Kill every process of the command when the launcher's end of the
    /// report socket closes (the launcher died or dropped the command).
    int kill_when_launcher_exits;
    /// Try to start the keeper as pid 1 of new mount and pid namespaces
    /// (CSB_NAMESPACES_*), with a private tmpfs on /dev/shm and a procfs
    /// that shows the sandbox's processes only; without the kernel's
    /// consent the keeper starts as a plain fork and reports 0.
    int private_namespaces;
    /// Also try a user namespace mapping `uid`/`gid` to themselves (needed
    /// without CAP_SYS_ADMIN; root is tried without one first).
    int user_namespace_allowed;
    uid_t uid;
    gid_t gid;
    /// Landlock rights added, in the keeper, beneath the new /proc and
    /// /dev/shm (to `csb_child_plan.ruleset_fd`, before the child restricts itself).
    uint64_t proc_access;
    uint64_t shm_access;
    /// The private /dev/shm's size limit, as tmpfs's `size=` option (bytes).
    uint64_t shm_size;
    /// Make every mount of the keeper's namespace read-only, except the
    /// writable folders, each bound over itself: the kernel then refuses
    /// chmod, chown, utimes and xattr writes outside them (EROFS) and the
    /// filter lets them through. Without the namespaces (CSB_SPAWN_NO_NAMESPACES)
    /// or if any step fails (CSB_KEEPER_READ_ONLY_MOUNTS, before the command
    /// starts), the launcher supervises instead.
    int read_only_mounts;
    /// The writable folders: each path is opened again in the namespace and
    /// must be the inode of the matching fd (the launcher's, pinned open).
    const char *const *writable_paths;
    const int *writable_fds;
    int writable_count;
};

/// What the keeper reports in CSB_KEEPER_NAMESPACES (a bit set).
enum csb_namespaces {
    CSB_NAMESPACES_PID_MOUNT = 1,  // the keeper is pid 1 of its own pid and mount namespaces
    CSB_NAMESPACES_USER = 2,       // ... inside a user namespace of its own
    CSB_NAMESPACES_SHM = 4,        // a private tmpfs is on /dev/shm, with a Landlock rule
    CSB_NAMESPACES_PROC = 8,       // a procfs of the pid namespace is on /proc, with a Landlock rule
    CSB_NAMESPACES_READ_ONLY_MOUNTS = 16,  // every mount read-only but the writable folders (and /dev/shm)
};

/// Messages the keeper adds to the child's report (the child's failures use `csb_child_stage`).
enum csb_keeper_message {
    CSB_KEEPER_RUNNING = 100,   // value: the command's pid; the exec succeeded unless a failure came first
    CSB_KEEPER_EXITED,          // value: the command's wait status; all its processes are gone
    CSB_KEEPER_SESSION,         // failures of the keeper's own set-up, with errno
    CSB_KEEPER_SUBREAPER,
    CSB_KEEPER_LANDLOCK,
    CSB_KEEPER_SIGNALS,
    CSB_KEEPER_FORK,
    CSB_KEEPER_NAMESPACES,      // value: csb_namespaces bits; sent before CSB_KEEPER_RUNNING
    CSB_KEEPER_ID_MAP,          // failures of the namespace set-up, with errno
    CSB_KEEPER_MOUNT,
    CSB_KEEPER_READ_ONLY_MOUNTS,  // the read-only mounts could not be made: nothing ran
};

/// 1 when the kernel refuses chmod on anonymous inodes and pidfds, which are
/// shared or global objects that a root command (uid 0 without capabilities)
/// owns: read-only mounts cannot guard them, so the keeper makes none
/// unless this holds (Linux 6.15 on). Probed with a no-op fchmod.
int csb_internal_inodes_refuse_setattr(void);
/// 1 when the kernel refuses a no-op `fchmod` (the mode it has) on `fd`
/// (EPERM or EOPNOTSUPP), 0 otherwise or for -1; closes `fd`.
/// Async-signal-safe: the keeper calls it after fork.
int csb_refuses_noop_chmod(int fd);

/// `csb_spawn_kept`'s answer when `read_only_mounts` was asked and the kernel
/// refused the namespaces: no keeper was started.
#define CSB_SPAWN_NO_NAMESPACES (-2)

static const uint32_t CSB_LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF = 1U << 0;  // ABI 7

/// Forks the keeper (plain fork, or a clone into new pid and mount namespaces
/// when `private_namespaces` asks and the kernel consents; it runs only
/// async-signal-safe C), which
/// becomes a child subreaper in a session of its own, optionally enters a
/// signal-scoped Landlock domain, and starts the confined child that applies
/// `plan` and execs. The keeper relays SIGINT, SIGTERM, SIGHUP, SIGQUIT,
/// SIGUSR1 and SIGUSR2 to the command; when the command exits (or the
/// launcher goes, see `kill_when_launcher_exits`) it kills and reaps every
/// process the command started, reports CSB_KEEPER_EXITED and exits.
/// Returns 0 with the keeper's pid and pidfd and the launcher's end of the
/// report socket; read it with `csb_child_report`.
int csb_spawn_kept(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper,
                   pid_t *keeper_pid, int *keeper_pidfd, int *report_fd);

/// Stops forwarding to `pid` (the keeper, about to be reaped, so that its pid
/// cannot be reused under the handler): signals are held again, as with 0.
void csb_forward_signals_stop(pid_t pid);

/// Reads one message of the report: returns 1 with `stage`/`error`/`value`
/// (and `received_fd` for the listener), or 0 at end of file (the keeper exited).
int csb_child_report(int report_fd, int *stage, int *error, int *value, int *received_fd);

// MARK: Terminal relay

/// Opens the terminal behind `fd` again through /proc/self/fd, as a new open
/// file description with `flags | O_NOCTTY | O_CLOEXEC | O_NONBLOCK`, so that
/// non-blocking use does not change the description the shell shares. Fails
/// with ENXIO for a pty master (reopening /dev/ptmx would make a new pty) and
/// with ENOTTY when the reopened file is not the same terminal.
int csb_reopen_terminal(int fd, int flags);
/// `ioctl(TIOCGWINSZ)` on `from`, then `ioctl(TIOCSWINSZ)` on `to`.
int csb_copy_window_size(int from, int to);
/// `ioctl(FIONREAD)`: bytes ready to read without blocking.
int csb_bytes_readable(int fd);
/// A non-blocking pipe's read end that gets a byte at each SIGWINCH; the
/// handler (installed once per process) still calls a handler installed
/// before it. At most 64 watchers at a time (EMFILE beyond).
int csb_window_watch(void);
/// Stops a watch and closes its pipe, never under a running handler.
void csb_window_unwatch(int fd);

// MARK: Version

/// The commit `scripts/build-release` wrote into this binary (at most 63
/// bytes), or "" when it was built another way.
const char *csb_build_commit(void);

#endif

// MARK: Coordination

/// `fcntl(F_OFD_SETLK / F_OFD_SETLKW)` on the whole file: `type` is F_RDLCK,
/// F_WRLCK or F_UNLCK. Open file description locks belong to the open file,
/// not the process, so threads exclude each other too, and they vanish when
/// the last descriptor closes (a killed holder releases them).
int csb_ofd_lock(int fd, short type, int wait);
extern const short CSB_F_RDLCK;
extern const short CSB_F_WRLCK;
extern const short CSB_F_UNLCK;

/// `renameat2(2)` with RENAME_NOREPLACE: EEXIST rather than replacing what
/// the new name holds (the protocol never overwrites a name it did not lock).
int csb_rename_noreplace(int olddirfd, const char *oldname, int newdirfd, const char *newname);

/// `openat(2)` of a regular file, never following a last-component link and
/// never blocking on a FIFO (O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, then
/// O_NONBLOCK cleared): ELOOP for a link, EINVAL for anything but a regular file.
int csb_open_regular(int dirfd, const char *name, int flags, unsigned int mode);

// MARK: Arguments

/// The process's argc/argv as the ELF loader passed them, saved by a
/// constructor: the Swift runtime reads /proc/self/cmdline instead, which a
/// sandbox without /proc cannot read.
int csb_saved_argc(void);
char *const *csb_saved_argv(void);

/// `dl_iterate_phdr(3)`: calls `visit` with the path of every shared object
/// the loader mapped (not the program itself), with no syscall.
void csb_loaded_objects(void (*visit)(const char *path, void *context), void *context);
