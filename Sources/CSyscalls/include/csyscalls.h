// Thin wrappers for what Swift cannot reach: raw and variadic syscalls and
// kernel structs newer than Debian's headers. Every function returns -1 and
// sets errno on failure, like libc; none retries EINTR (Swift's
// `syscallRetrying` does, in one place). The code between fork and exec is
// apart, in CLaunch.
#ifndef CSYSCALLS_H
#define CSYSCALLS_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

// Pointers are non-null unless marked _Nullable.
#pragma clang assume_nonnull begin

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
static const uint32_t CSB_LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF = 1U << 0;  // ABI 7
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
/// The same with `RESOLVE_NO_SYMLINKS` (no link followed anywhere on the way, the last name included): ELOOP at a link.
int csb_openat2_path_no_links(int dirfd, const char *path);
/// O_PATH | O_NOFOLLOW of `path` below `dirfd`, following no link at all
/// and crossing no mount (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV):
/// where an unconfined writer applies what a sandboxed command chose.
int csb_openat2_path_strictly_beneath(int dirfd, const char *path);
/// `fchmodat(2)` through `/proc/self/fd/N`, which reaches the inode of an O_PATH fd.
int csb_chmod_fd(int fd, uint32_t mode);
/// `fchownat(2)` with `AT_EMPTY_PATH`.
int csb_chown_fd(int fd, uint32_t uid, uint32_t gid);
/// `utimensat(2)` with `AT_EMPTY_PATH`; `times` may be NULL (now).
int csb_utimens_fd(int fd, const int64_t *_Nullable times_sec_nsec);
/// Sets `FS_NOCOW_FL` on an empty file (`FS_IOC_SETFLAGS`): on btrfs its
/// blocks are then overwritten in place, not copied. -1 with errno where
/// the filesystem has no such flag (ENOTTY, EOPNOTSUPP, EINVAL).
int csb_set_no_copy_on_write(int fd);
/// `mmap(2)` that, for a writable shared mapping of a file, first gives the
/// file real blocks under the whole range (`fallocate(2)`, keeping its size):
/// a write through the mapping into a hole needs a block then, and where the
/// disk has none the kernel can only raise SIGBUS. MAP_FAILED with errno
/// (ENOSPC, EDQUOT...) when they cannot be had; a filesystem without
/// fallocate (EOPNOTSUPP) is mapped as it is. Installed as SQLite's `mmap`
/// (see `Ledger`), which maps the -shm through it; it retries EINTR itself,
/// since SQLite does not.
void *_Nullable csb_mmap_allocated(void *_Nullable address, size_t length, int protection, int flags, int fd, off_t offset);
/// Copies `src`'s whole contents into the empty file `dst` (both regular
/// files), from offset 0 whatever the descriptors' offsets: a reflink
/// (FICLONE) where the filesystem shares extents, else its data ranges
/// (SEEK_DATA: holes stay holes) by copy_file_range, else read and write.
/// 0, or -1 with errno.
int csb_copy_file_data(int dst, int src);
/// `syncfs(2)` (hidden from Swift by Glibc): flushes the filesystem `fd` is on.
int csb_syncfs(int fd);
/// `setxattr(2)` / `removexattr(2)` through `/proc/self/fd/N`.
int csb_setxattr_fd(int fd, const char *name, const void *_Nullable value, size_t size, int flags);
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
/// `name_to_handle_at(dirfd, name, ...)`, not following a last link: an
/// entry's handle without opening it.
int csb_name_to_handle_at(int dirfd, const char *name, struct csb_file_handle *handle, int *mount_id);
/// `open_by_handle_at(mount_fd, handle, O_PATH | O_DIRECTORY)`: needs CAP_DAC_READ_SEARCH.
int csb_open_by_handle(int mount_fd, struct csb_file_handle *handle);
/// `fstatfs(2)`: the filesystem's f_fsid and f_type (hidden from Swift by Glibc).
int csb_filesystem_identity(int fd, uint64_t *fsid, uint64_t *type);
/// O_PATH, which Glibc hides from Swift.
extern const int CSB_O_PATH;
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
/// 1 when descriptors `a` and `b` of this process are the same open file
/// (`kcmp(KCMP_FILE)`), 0 when not, -1 with errno.
int csb_same_open_file(int a, int b);
/// `pipe2(fds, O_CLOEXEC)` (Glibc's module hides pipe2): no other thread's child inherits either end.
int csb_pipe_cloexec(int *_Nonnull fds);
/// `inotify_rm_watch(2)`.
int csb_inotify_rm_watch(int instance, int watch);
/// `posix_spawn_file_actions_addclosefrom_np` (glibc 2.34, hidden by Glibc's
/// module): the spawned program has no descriptor from `lowest` up.
/// `actions` is a `posix_spawn_file_actions_t *`.
int csb_spawn_close_from(void *actions, int lowest);
/// `pidfd_send_signal(2)`: signals exactly the process the pidfd refers to (ESRCH once it has exited).
int csb_pidfd_send_signal(int pidfd, int sig);
/// `pidfd_open(tid, PIDFD_THREAD)` then `pidfd_getfd(2)`: a copy of a thread's fd.
int csb_copy_fd_of_thread(pid_t tid, int fd);
/// `fstatfs(2)`'s `f_type`: which file system `fd` is on.
int csb_filesystem_type(int fd, int64_t *_Nonnull type);
/// `ioctl(SIOCGSKNS)`: a descriptor of the network namespace `socket` was made in.
int csb_socket_network_namespace(int socket);
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
int csb_thread_effective_caps_clear(uint32_t saved[_Nonnull 6]);
int csb_thread_effective_caps_restore(const uint32_t saved[_Nonnull 6]);
/// Forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to `pid`
/// from an async-signal-safe handler. `pid` 0 catches and holds the last
/// signal until a later call names the pid; -1 restores the defaults.
int csb_forward_signals_to(pid_t pid);

/// Stops forwarding to `pid` (the keeper, about to be reaped, so that its pid
/// cannot be reused under the handler): signals are held again, as with 0.
void csb_forward_signals_stop(pid_t pid);


/// 1 when the kernel refuses chmod on anonymous inodes and pidfds, which are
/// shared or global objects that a root command (uid 0 without capabilities)
/// owns: read-only mounts cannot guard them, so the keeper makes none
/// unless this holds (Linux 6.15 on). Probed with a no-op fchmod.
int csb_internal_inodes_refuse_setattr(void);
/// 1 when the kernel refuses a no-op `fchmod` (the mode it has) on `fd`
/// (EPERM or EOPNOTSUPP), 0 otherwise or for -1; closes `fd`.
/// Async-signal-safe: the keeper calls it after fork.
int csb_refuses_noop_chmod(int fd);


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
ssize_t csb_getxattr_fd(int fd, const char *name, void *_Nullable value, size_t size);
ssize_t csb_listxattr_fd(int fd, char *_Nullable list, size_t size);
/// `ioctl(SECCOMP_IOCTL_NOTIF_SET_FLAGS, SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP)`
/// (Linux 6.6): the child and the supervisor hand each request over on
/// one CPU, which shortens every round trip. EINVAL/ENOTTY on older kernels.
int csb_seccomp_notify_sync_wakeup(int listener);

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

/// `fgetxattr(2)`, `fsetxattr(2)` (flags 0) and `fremovexattr(2)` on a
/// descriptor that is not O_PATH (Glibc's Swift module hides them): what
/// copying a POSIX ACL (`system.posix_acl_access`) from one open file to
/// another needs, with no /proc.
ssize_t csb_fgetxattr(int fd, const char *name, void *_Nullable value, size_t size);
int csb_fsetxattr(int fd, const char *name, const void *value, size_t size);
int csb_fremovexattr(int fd, const char *name);

// MARK: Arguments

/// The process's argc/argv as the ELF loader passed them, saved by a
/// constructor: the Swift runtime reads /proc/self/cmdline instead, which a
/// sandbox without /proc cannot read.
int csb_saved_argc(void);
char *_Nullable const *_Nullable csb_saved_argv(void);

/// `dl_iterate_phdr(3)`: calls `visit` with the path of every shared object
/// the loader mapped (not the program itself), with no syscall.
void csb_loaded_objects(void (*visit)(const char *path, void *_Nullable context), void *_Nullable context);

#pragma clang assume_nonnull end

#endif
