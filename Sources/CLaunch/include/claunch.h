// The only code that runs between fork and exec: the keeper and the
// confined child, planned entirely by the launcher (Swift) and applied with
// async-signal-safe calls and raw syscalls. Every function returns -1 and
// sets errno on failure, like libc.
#ifndef CLAUNCH_H
#define CLAUNCH_H

#include "csyscalls.h"

// Pointers are non-null unless marked _Nullable.
#pragma clang assume_nonnull begin

// MARK: The confined child

/// What the child does between fork and exec, all prepared by the parent.
struct csb_child_plan {
    const char *_Nullable path;              // absolute path to execve
    char *_Nullable const *_Nullable argv;
    char *_Nullable const *_Nullable envp;
    const char *_Nullable working_directory;
    int working_directory_fd;      // fchdir here when >= 0: the folder the parent verified
    int reenter_working_directory; // then chdir(working_directory) and check it is that folder (set by a keeper in a new mount namespace)
    int stdio[3];                  // fds to become 0, 1, 2
    const int *_Nullable kept_fds;           // extra fds that survive exec, unchanged
    int kept_fds_count;
    int ruleset_fd;                // Landlock ruleset, or -1 for none
    uint32_t restrict_flags;       // landlock_restrict_self flags
    /// Layers entered before `ruleset_fd`, with the same flags: each handles
    /// only REFER and IOCTL_DEV, and keeps files of other folders out of one
    /// writable folder (see `ReparentingLayers`). The keeper adds its
    /// private /dev/shm to each, as to `ruleset_fd`.
    const int *_Nullable refer_rulesets;
    int refer_rulesets_count;
    const void *_Nullable seccomp_filter;    // struct sock_filter[], or NULL
    unsigned short seccomp_filter_length;
    const void *_Nullable seccomp_guard;     // a second filter loaded before it, or NULL
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
    const char *_Nullable stdio_reopen[3];
    /// Resource limits to set, soft and hard, before exec (never raised:
    /// each is lowered to the smaller of its value and the current hard limit).
    const struct csb_rlimit *_Nullable rlimits;
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
    const char *_Nullable const *_Nullable writable_paths;
    const int *_Nullable writable_fds;
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

/// `csb_spawn_kept`'s answer when `read_only_mounts` was asked and the kernel
/// refused the namespaces: no keeper was started.
#define CSB_SPAWN_NO_NAMESPACES (-2)


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

/// Reads one message of the report: returns 1 with `stage`/`error`/`value`
/// (and `received_fd` for the listener), or 0 at end of file (the keeper exited).
int csb_child_report(int report_fd, int *stage, int *error, int *value, int *received_fd);

/// A person's name for a failure stage (`csb_child_stage` or `csb_keeper_message`),
/// or NULL for a number that is none.
const char *_Nullable csb_stage_name(int stage);

#pragma clang assume_nonnull end

#endif
