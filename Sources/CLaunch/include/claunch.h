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
    /// The writable folders and files: each path is opened again in the
    /// namespace and must be the inode of the matching fd (the launcher's,
    /// pinned open).
    const char *_Nullable const *_Nullable writable_paths;
    const int *_Nullable writable_fds;
    int writable_count;

    /// Build the private view (needs `private_namespaces`): a new root that
    /// holds only what `view_steps` put there, the keeper's own /dev, /tmp
    /// and /proc; anything else does not exist for the command. Any failure
    /// is CSB_KEEPER_VIEW (value: CSB_VIEW_FAILED_*, or the failing step's
    /// index), before the command starts.
    int private_view;
    /// In the private view: a network namespace of the sandbox's own,
    /// loopback up (the policy has no network entitlement).
    int private_network;
    /// With `private_network`: one made ahead (csb_network_ahead_finish),
    /// which the keeper joins instead of cloning into a new one, when it
    /// shares the launcher's user namespace; `network_namespace_fd` is its
    /// descriptor when `has_network_namespace` is set.
    int has_network_namespace;
    int network_namespace_fd;
    const struct csb_view_step *_Nullable view_steps;
    int view_steps_count;
    /// Checked once the root is final: each path, followed from the new
    /// root, must be its inode (system paths reached through a link).
    const struct csb_view_check *_Nullable view_checks;
    int view_checks_count;
    /// Landlock rights added beneath the private /tmp (as `shm_access`),
    /// and on the private devpts and /dev/tty (the sandbox's own terminals).
    uint64_t tmp_access;
    uint64_t terminal_access;
    /// The private /tmp's limits: bytes and files (neither may be 0).
    uint64_t tmp_size;
    uint64_t tmp_inodes;
    /// In the private view, open the command's pty in its own devpts and
    /// send both ends to the launcher (CSB_KEEPER_PTY_MASTER, then
    /// CSB_KEEPER_PTY_TERMINAL); the terminal side replaces each of the
    /// child's stdio whose bit is set (1: stdin, 2: stdout, 4: stderr).
    int pty_slots;
    /// `struct termios` and `struct winsize` for that pty (the user's
    /// terminal's), or NULL.
    const void *_Nullable pty_modes;
    const void *_Nullable pty_window;
    /// Live grants (needs `private_view`): the grant area, a tmpfs at
    /// CSB_GRANT_AREA in the view, read-only for the command, with a rule of
    /// `grant_area_access` in its layer (and REFER in each layer that keeps
    /// writable folders apart); the keeper sends its mounts to the launcher
    /// (CSB_KEEPER_GRANT_AREA), whose grant helper attaches folders there
    /// while the command runs (see grantarea.c).
    int grant_area;
    uint64_t grant_area_access;
    /// The network by name (needs `private_network`): sockets made in the
    /// sandbox's network namespace once its loopback is up, each sent to the
    /// launcher (CSB_KEEPER_EGRESS, value: its index), which serves them
    /// from outside: nothing outside the namespace can connect to them.
    const struct csb_egress_listener *_Nullable egress_listeners;
    int egress_listeners_count;
};

/// One socket of the network by name: IPv4 `address` (network order) and
/// `port`; a UDP socket when `datagram` is set, else a listening TCP one.
struct csb_egress_listener {
    uint32_t address;
    uint16_t port;
    int datagram;
};

/// A new network namespace, loopback up, made on a thread of the launcher
/// while it plans the launch: a network namespace costs the kernel some
/// 400 µs (every subsystem's per-namespace setup), which then overlaps the
/// planning instead of delaying the keeper's clone. Only where the launcher
/// may make one in its own user namespace (root); NULL otherwise or when no
/// thread could start (the keeper then clones into a new one, as before).
struct csb_network_ahead;
struct csb_network_ahead *_Nullable csb_network_ahead_start(void);
/// Waits for the thread and frees `ahead`: the namespace's descriptor
/// (O_CLOEXEC), or -1 with errno when the kernel refused it.
int csb_network_ahead_finish(struct csb_network_ahead *_Nonnull ahead);

/// One step of the private view, applied in order, paths relative to the
/// new root. The launcher plans every step; the keeper only checks and acts.
struct csb_view_step {
    int kind;                       // csb_view_step_kind
    const char *target;             // where it goes in the view ("usr", "etc/passwd")
    const char *_Nullable source;   // BIND: the host's path of what is bound (the target's, or a staged grant's clone); LINK: the link's text; FILE: its content, or NULL (empty)
    uint64_t device;                // BIND (of `source`), CHECK: the inode the launcher verified
    uint64_t inode;
    uint32_t flags;                 // csb_view_flags
    uint64_t target_device;         // NESTED BIND: what `target` must be in the bind around it (the host's
    uint64_t target_inode;          // inode there; not `source`'s for a staged grant)
};

enum csb_view_step_kind {
    CSB_VIEW_DIRECTORY = 1,  // mkdir on the keeper's own tmpfs (a mount point, or a folder on the way to one)
    CSB_VIEW_FILE,           // a file there: a mount point for a file (empty), or one of the launcher's (`source`)
    CSB_VIEW_LINK,           // a symbolic link there, with the host's text
    CSB_VIEW_BIND,           // the host's `source` cloned (it must be device/inode) and attached at `target`
    CSB_VIEW_CHECK,          // `target`, inside a bind, must be device/inode (no link followed)
};

enum csb_view_flags {
    CSB_VIEW_WRITABLE = 1,    // BIND: not made read-only
    CSB_VIEW_RECURSIVE = 2,   // BIND: with the mounts beneath it (a folder)
    CSB_VIEW_DEVICE = 4,      // BIND: a device node (no nodev)
    CSB_VIEW_OPTIONAL = 8,    // BIND: skipped when the name leads elsewhere now (the launcher's own files)
    CSB_VIEW_NESTED = 16,     // BIND: `target` lies inside an earlier bind and must be target_device/target_inode
    CSB_VIEW_REVOCABLE = 32,  // BIND: a grant: the attached mount goes to the launcher (CSB_KEEPER_VIEW_GRANT), which may detach it
};

struct csb_view_check {
    const char *path;   // absolute, in the view, links followed
    uint64_t device;
    uint64_t inode;
};

/// What failed while the private view was built (the value of CSB_KEEPER_VIEW
/// when it is not a step's index, which counts from 0).
enum csb_view_failure {
    CSB_VIEW_FAILED_NETWORK = -1,   // bringing up the loopback interface
    CSB_VIEW_FAILED_ROOT = -2,      // the new root's tmpfs
    CSB_VIEW_FAILED_DEV = -3,       // /dev's tmpfs, devpts or /dev/shm
    CSB_VIEW_FAILED_TMP = -4,       // /tmp's tmpfs
    CSB_VIEW_FAILED_PIVOT = -5,     // pivot_root into the new root, detaching the host's
    CSB_VIEW_FAILED_PROC = -6,      // the sandbox's /proc
    CSB_VIEW_FAILED_READ_ONLY = -7, // making the new root and /dev read-only
    CSB_VIEW_FAILED_RULES = -8,     // Landlock rules for the keeper's own mounts
    CSB_VIEW_FAILED_PTY = -9,       // the command's pty in its own devpts
    CSB_VIEW_FAILED_CHECK = -10,    // a path followed in the view is not what the launcher verified
    CSB_VIEW_FAILED_GRANT_AREA = -11, // the live grants' area, its namespaces or its helper
    CSB_VIEW_FAILED_EGRESS = -12,   // a socket of the network by name, in the sandbox's network namespace
};

/// What the keeper reports in CSB_KEEPER_NAMESPACES (a bit set).
enum csb_namespaces {
    CSB_NAMESPACES_PID_MOUNT = 1,  // the keeper is pid 1 of its own pid and mount namespaces
    CSB_NAMESPACES_USER = 2,       // ... inside a user namespace of its own
    CSB_NAMESPACES_SHM = 4,        // a private tmpfs is on /dev/shm, with a Landlock rule
    CSB_NAMESPACES_PROC = 8,       // a procfs of the pid namespace is on /proc, with a Landlock rule
    CSB_NAMESPACES_READ_ONLY_MOUNTS = 16,  // every mount read-only but the writable folders (and /dev/shm)
    CSB_NAMESPACES_VIEW = 32,      // the private view: a new root holding only what the launcher planned
    CSB_NAMESPACES_NETWORK = 64,   // a network namespace of its own, loopback only
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
    CSB_KEEPER_VIEW,            // the private view could not be built (value: csb_view_failure or a step): nothing ran
    CSB_KEEPER_PTY_MASTER,      // the pty's master, passed with the message
    CSB_KEEPER_PTY_TERMINAL,    // its terminal side, passed with the message
    CSB_KEEPER_GRANT_AREA,      // the grant area's writable mount (value 0) or its O_PATH in the view (1), passed
    CSB_KEEPER_VIEW_GRANT,      // a CSB_VIEW_REVOCABLE bind as attached in the view (value: the step's index), passed
    CSB_KEEPER_EGRESS,          // a socket of the network by name (value: its index in `egress_listeners`), passed
};

/// `csb_spawn_kept`'s answer when `read_only_mounts` or `private_view` was
/// asked and the kernel refused the namespaces (errno says why): no keeper
/// was started.
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

// MARK: Live grants

/// Where the grant area is in the view.
#define CSB_GRANT_AREA "/run/sandboxed-run/grants"

enum csb_grant_operation {
    CSB_GRANT_ATTACH = 1,   // clone `path` (it must be device/inode) and attach it at CSB_GRANT_AREA/`name`
    CSB_GRANT_DETACH = 2,   // detach CSB_GRANT_AREA/`name` and remove its mount point, if nothing holds it
    CSB_GRANT_DETACH_MOUNT = 3,  // detach the mount whose root the descriptor passed with the request is (a launch-time grant)
};

enum csb_grant_flags {
    CSB_GRANT_WRITABLE = 1,   // not made read-only
    CSB_GRANT_EXECUTE = 2,    // not made noexec
};

/// One request from the launcher to the grant helper (one SEQPACKET message).
struct csb_grant_request {
    uint32_t operation;     // csb_grant_operation
    uint32_t flags;         // csb_grant_flags
    uint64_t sequence;      // echoed in the reply: a late reply is never taken for another's
    uint64_t device;        // ATTACH: the inode the launcher verified, held open until the answer
    uint64_t inode;
    char name[16];          // the mount point in the area: digits, NUL-terminated
    char path[4096];        // ATTACH: the host's path (the kernel's name of the launcher's descriptor)
};

/// The helper's answer: 0, or the errno of the step that failed.
struct csb_grant_reply {
    int32_t error;
    int32_t step;           // csb_grant_step
    uint64_t sequence;      // the request's
};

enum csb_grant_step {
    CSB_GRANT_STEP_REQUEST = 1,  // the request itself was malformed
    CSB_GRANT_STEP_START,        // the helper's set-up: joining the sandbox's user namespace, a namespace of the host's tree
    CSB_GRANT_STEP_HOST,         // entering the namespace that sees the host's tree
    CSB_GRANT_STEP_CLONE,        // cloning the folder there (open_tree)
    CSB_GRANT_STEP_IDENTITY,     // the clone is not the inode the launcher verified
    CSB_GRANT_STEP_FLAGS,        // nosuid, nodev, read-only, noexec on the clone
    CSB_GRANT_STEP_VIEW,         // entering the view's namespace again
    CSB_GRANT_STEP_MOUNT_POINT,  // making the mount point in the area
    CSB_GRANT_STEP_ATTACH,       // move_mount into the area
    CSB_GRANT_STEP_DETACH,       // umount2 of a grant
    CSB_GRANT_STEP_HELD,         // DETACH, DETACH_MOUNT: the command still holds the folder (a descriptor, a working directory, an open file, one in flight); still attached
};

/// Forks the grant helper from the launcher (only async-signal-safe C in the
/// child): it serves requests on `socket_fd` until the launcher closes its
/// end. `keeper_pidfd`: the keeper's, whose mount namespace is the view;
/// `user_namespace`: the sandbox has one (the helper joins it). `area`,
/// `area_view`: what CSB_KEEPER_GRANT_AREA passed, or -1 when the sandbox
/// has no area (then it only detaches launch-time grants). Returns 0 with
/// the helper's pidfd in `pidfd` (the caller reaps it), or -1 with errno.
int csb_grant_helper_spawn(int keeper_pidfd, int user_namespace, int area, int area_view, int socket_fd, int *_Nonnull pidfd);

/// Sends one request to the grant helper, with `passed_fd` (SCM_RIGHTS) when
/// >= 0: the mount a CSB_GRANT_DETACH_MOUNT detaches. EINTR retried.
ssize_t csb_grant_send(int socket_fd, const struct csb_grant_request *_Nonnull request, int passed_fd);

/// Reads one message of the report: returns 1 with `stage`/`error`/`value`
/// (and `received_fd` for the listener), or 0 at end of file (the keeper exited).
int csb_child_report(int report_fd, int *stage, int *error, int *value, int *received_fd);

/// A person's name for a failure stage (`csb_child_stage` or `csb_keeper_message`),
/// or NULL for a number that is none.
const char *_Nullable csb_stage_name(int stage);

/// Steps of `csb_probe_private_view`, the first that failed (0: none did).
enum csb_view_probe_step {
    CSB_VIEW_PROBE_USER_NAMESPACE = 1,
    CSB_VIEW_PROBE_ID_MAP = 2,
    CSB_VIEW_PROBE_NAMESPACES = 3,
    CSB_VIEW_PROBE_MOUNT = 4,
};

/// For `doctor`: whether a forked child can take the namespaces the private
/// view is built in (mount and pid, inside a new user namespace when
/// `user_namespace`) and mount a tmpfs there. Sets `step` (0 when every step
/// worked) and `error` (its errno); -1 only when the child could not be started.
int csb_probe_private_view(int user_namespace, int *_Nonnull step, int *_Nonnull error);

#pragma clang assume_nonnull end

#endif
