// The private view: a new root, built by the keeper in its own mount
// namespace before the command starts, that holds only what the launcher
// planned (the container, the grants, the policy's system paths and the
// launcher's own files, each at its host path), a /dev of a few device
// nodes and a devpts of the sandbox's own, a private /tmp and /dev/shm, and
// the sandbox's /proc. Anything else does not exist for the command.
//
// Every bind is of the inode the launcher verified: its path is opened
// again here (open_tree on the launcher's descriptor would fail, as it is a
// mount of another namespace) and the clone's device and inode compared with
// what the launcher's descriptor said. The launcher's Landlock rules bind to
// those inodes, which bind mounts share, so they keep applying; the mounts
// made here get their rules here.
//
// Every mount happens before the keeper enters its own Landlock layer (a
// layer that handles a file right refuses mount calls), and the keeper's
// "/" rule is added once the root is final (it binds to the root's inode).
// Only async-signal-safe calls and raw syscalls: this is a fork of the
// launcher.
#define _GNU_SOURCE 1
#include "internal.h"

#include <linux/openat2.h>
#include <net/if.h>
#include <termios.h>

// The ptys a sandbox may hold at once.
#define CSB_VIEW_PTYS "64"
// open_tree_attr(2): not in Debian 12's headers; one number on every architecture.
#define CSB_SYS_OPEN_TREE_ATTR 467

// The keeper's own mounts, kept for the rules and flags set once the root is final.
struct csb_view_mounts { int root, dev, tmp, pts, proc; };

static void csb_close_saving_errno(int fd) {
    int saved = errno;
    if (fd >= 0) close(fd);
    errno = saved;
}

// Decimal digits of `value` at `out`, NUL-terminated, without printf.
static void csb_decimal(char *out, uint64_t value) {
    char digits[21];
    size_t count = 0;
    do { digits[count++] = (char)('0' + value % 10); value /= 10; } while (value != 0);
    for (size_t i = 0; i < count; i++) out[i] = digits[count - 1 - i];
    out[count] = '\0';
}

// A new tmpfs, detached, of at most `size` bytes and `inodes` files (never
// tmpfs's default of half the host's memory): its mount's descriptor.
static int csb_tmpfs(const char *mode, uint64_t size, uint64_t inodes, unsigned int attributes) {
    if (size == 0 || inodes == 0) { errno = EINVAL; return -1; }
    int context = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (context < 0) return -1;
    char bytes[24], count[24];
    csb_decimal(bytes, size);
    csb_decimal(count, inodes);
    if (fsconfig(context, FSCONFIG_SET_STRING, "mode", mode, 0) != 0
        || fsconfig(context, FSCONFIG_SET_STRING, "size", bytes, 0) != 0
        || fsconfig(context, FSCONFIG_SET_STRING, "nr_inodes", count, 0) != 0
        || fsconfig(context, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) {
        csb_close_saving_errno(context);
        return -1;
    }
    int mount = fsmount(context, FSMOUNT_CLOEXEC, attributes);
    csb_close_saving_errno(context);
    return mount;
}

// A devpts of the sandbox's own (each mount of devpts is a new instance):
// /dev/pts/ptmx makes ptys that exist only here, at most CSB_VIEW_PTYS of
// them: every instance draws on the kernel's pty.max, shared with other
// sandboxes and containers.
static int csb_devpts(void) {
    int context = fsopen("devpts", FSOPEN_CLOEXEC);
    if (context < 0) return -1;
    if (fsconfig(context, FSCONFIG_SET_STRING, "max", CSB_VIEW_PTYS, 0) != 0
        || fsconfig(context, FSCONFIG_SET_STRING, "ptmxmode", "0666", 0) != 0
        || fsconfig(context, FSCONFIG_SET_STRING, "mode", "0620", 0) != 0
        || fsconfig(context, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) {
        csb_close_saving_errno(context);
        return -1;
    }
    int mount = fsmount(context, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
    csb_close_saving_errno(context);
    return mount;
}

// The sandbox's procfs (of the keeper's pid namespace), read-only. Made
// while the host's /proc is still mounted here: a user namespace may mount
// a procfs only where one is already fully visible.
static int csb_procfs(void) {
    int context = fsopen("proc", FSOPEN_CLOEXEC);
    if (context < 0) return -1;
    // Processes the command may not ptrace (the keeper, pid 1: a fork of
    // the launcher, whose command line names host paths) are not listed.
    // "ptraceable", not "invisible": that one exempts the mount's gid, 0,
    // which a command launched by root is in.
    if (fsconfig(context, FSCONFIG_SET_STRING, "hidepid", "ptraceable", 0) != 0
        || fsconfig(context, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) {
        csb_close_saving_errno(context);
        return -1;
    }
    int mount = fsmount(context, FSMOUNT_CLOEXEC, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    csb_close_saving_errno(context);
    return mount;
}

// The loopback interface of a new network namespace starts down.
int csb_loopback_up(void) {
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return -1;
    struct ifreq request;
    memset(&request, 0, sizeof(request));
    memcpy(request.ifr_name, "lo", 3);
    int result = ioctl(sock, SIOCGIFFLAGS, &request);
    if (result == 0) {
        request.ifr_flags |= IFF_UP;
        result = ioctl(sock, SIOCSIFFLAGS, &request);
    }
    csb_close_saving_errno(sock);
    return result;
}

// `path` beneath `root` with no link followed and no step above it.
static int csb_open_beneath(int root, const char *path) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH;
    return (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
}

static int csb_is_inode(int fd, uint64_t device, uint64_t inode) {
    struct stat status;
    if (fstat(fd, &status) != 0) return -1;
    if ((uint64_t)status.st_dev != device || (uint64_t)status.st_ino != inode) { errno = ESTALE; return 0; }
    return 1;
}

// One bind: 1 done, 0 skipped (an optional step whose name leads elsewhere), -1 failed.
static int csb_view_bind(int root, const struct csb_view_step *step, int index, int report_fd) {
    int optional = (step->flags & CSB_VIEW_OPTIONAL) != 0;
    int recursive = (step->flags & CSB_VIEW_RECURSIVE) != 0;
    // The host's path of what is bound (the target's own, or a staged
    // grant's clone), in the namespace this keeper copied: the launcher
    // resolved it to its kernel name, so no link is on the way (the last
    // name is not followed; a link put on the way since leads to another
    // inode, which the comparison refuses).
    // The clone's flags, set while it is detached, so the command never
    // sees it otherwise. Device nodes keep their devices (nodev off), and run nothing.
    struct mount_attr attributes;
    memset(&attributes, 0, sizeof(attributes));
    attributes.attr_set = MOUNT_ATTR_NOSUID | ((step->flags & CSB_VIEW_DEVICE) ? MOUNT_ATTR_NOEXEC : MOUNT_ATTR_NODEV)
        | ((step->flags & CSB_VIEW_WRITABLE) ? 0 : MOUNT_ATTR_RDONLY);
    unsigned int clone_flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW | (recursive ? AT_RECURSIVE : 0);
    // open_tree_attr (Linux 6.15) clones and sets the flags in one call (a
    // launch makes some fifty binds); older kernels take the two calls.
    int clone = (int)syscall(CSB_SYS_OPEN_TREE_ATTR, AT_FDCWD, step->source, clone_flags, &attributes, sizeof(attributes));
    int flags_set = clone >= 0;
    if (clone < 0 && errno == ENOSYS) clone = open_tree(AT_FDCWD, step->source, clone_flags);
    if (clone < 0) return optional ? 0 : -1;
    int same = csb_is_inode(clone, step->device, step->inode);
    if (same <= 0) {
        csb_close_saving_errno(clone);
        return same == 0 && optional ? 0 : -1;
    }
    if (!flags_set && mount_setattr(clone, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attributes, sizeof(attributes)) != 0) {
        csb_close_saving_errno(clone);
        return -1;
    }
    int result;
    if (step->flags & CSB_VIEW_NESTED) {
        // Inside an earlier bind, whose folders the app may be changing:
        // found with no link followed, and it must be the very inode the
        // launcher found there (a staged grant's folder, covered by its clone).
        int target = csb_open_beneath(root, step->target);
        int here = target < 0 ? -1 : csb_is_inode(target, step->target_device, step->target_inode);
        result = here <= 0 ? -1 : move_mount(clone, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
        csb_close_saving_errno(target);
    } else {
        // A mount point the steps made on the keeper's own tmpfs.
        result = move_mount(clone, "", root, step->target, MOVE_MOUNT_F_EMPTY_PATH);
    }
    // The clone's descriptor is now the attached mount's root: the
    // launcher's grant helper detaches it by that when the grant is revoked.
    if (result == 0 && (step->flags & CSB_VIEW_REVOCABLE)) csb_report_send(report_fd, CSB_KEEPER_VIEW_GRANT, 0, index, clone);
    csb_close_saving_errno(clone);
    return result == 0 ? 1 : -1;
}

static int csb_view_step(int root, const struct csb_view_step *step, int index, int report_fd) {
    switch (step->kind) {
    case CSB_VIEW_DIRECTORY: return mkdirat(root, step->target, 0755);
    case CSB_VIEW_FILE: {
        if (step->source == NULL) return mknodat(root, step->target, S_IFREG | 0644, 0);
        // A file of the launcher's making (the network by name's resolv.conf).
        int fd = openat(root, step->target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) return -1;
        size_t length = strlen(step->source), done = 0;
        while (done < length) {
            ssize_t n = write(fd, step->source + done, length - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) { csb_close_saving_errno(fd); return -1; }
            done += (size_t)n;
        }
        return close(fd);
    }
    case CSB_VIEW_LINK:
        if (step->source == NULL) { errno = EINVAL; return -1; }
        return symlinkat(step->source, root, step->target);
    case CSB_VIEW_BIND:
        if (step->source == NULL) { errno = EINVAL; return -1; }
        return csb_view_bind(root, step, index, report_fd) < 0 ? -1 : 0;
    case CSB_VIEW_CHECK: {
        int target = csb_open_beneath(root, step->target);
        if (target < 0) return -1;
        int same = csb_is_inode(target, step->device, step->inode);
        csb_close_saving_errno(target);
        return same == 1 ? 0 : -1;
    }
    }
    errno = EINVAL;
    return -1;
}

// A rule beneath the mount `fd` is the root of (0 when there is no ruleset).
static int csb_rule_on(int ruleset, int fd, uint64_t access) {
    if (ruleset < 0 || access == 0) return 0;
    return csb_landlock_add_path_rule(ruleset, fd, access);
}

static const uint64_t csb_file_rights = CSB_LANDLOCK_ACCESS_FS_EXECUTE | CSB_LANDLOCK_ACCESS_FS_WRITE_FILE
    | CSB_LANDLOCK_ACCESS_FS_READ_FILE | CSB_LANDLOCK_ACCESS_FS_TRUNCATE | CSB_LANDLOCK_ACCESS_FS_IOCTL_DEV;

// The rules for the keeper's /tmp and terminals: in the command's layer,
// and in each layer that keeps writable folders apart (they handle REFER
// and IOCTL_DEV). /tmp is a mount of its own, so nothing is renamed between
// it and another folder (EXDEV); renames within it need REFER in every layer.
static int csb_view_rules(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper, const struct csb_view_mounts *mounts) {
    if (csb_rule_on(plan->ruleset_fd, mounts->tmp, keeper->tmp_access) != 0) return -1;
    if (csb_rule_on(plan->ruleset_fd, mounts->pts, keeper->terminal_access) != 0) return -1;
    // /dev/tty: the host's node, bound by a step (the controlling terminal, the relay's pty).
    int tty = csb_open_beneath(mounts->dev, "tty");
    if (tty >= 0 && csb_rule_on(plan->ruleset_fd, tty, keeper->terminal_access & csb_file_rights) != 0) {
        csb_close_saving_errno(tty);
        return -1;
    }
    for (int i = 0; i < plan->refer_rulesets_count; i++) {
        int layer = plan->refer_rulesets[i];
        if (csb_rule_on(layer, mounts->tmp, CSB_LANDLOCK_ACCESS_FS_REFER) != 0
            || ((keeper->terminal_access & CSB_LANDLOCK_ACCESS_FS_IOCTL_DEV)
                && (csb_rule_on(layer, mounts->pts, CSB_LANDLOCK_ACCESS_FS_IOCTL_DEV) != 0
                    || (tty >= 0 && csb_rule_on(layer, tty, CSB_LANDLOCK_ACCESS_FS_IOCTL_DEV) != 0)))) {
            csb_close_saving_errno(tty);
            return -1;
        }
    }
    csb_close_saving_errno(tty);
    return 0;
}

static int csb_view_fail(int *failure, int code) {
    *failure = code;
    return -1;
}

int csb_view_build(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper, int loopback_up, int report_fd, int *failure, int *proc_mounted) {
    *proc_mounted = 0;
    if (keeper->private_network && !loopback_up && csb_loopback_up() != 0) return csb_view_fail(failure, CSB_VIEW_FAILED_NETWORK);
    struct csb_view_mounts mounts = { -1, -1, -1, -1, -1 };
    int result = -1;
    // The root: a tmpfs stacked on the namespace's "/". Our root stays the
    // old one until pivot_root, so the host's paths resolve as before and
    // every step's target is reached through `mounts.root`.
    mounts.root = csb_tmpfs("0755", 1 << 20, 4096, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (mounts.root < 0 || move_mount(mounts.root, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0
        || mkdirat(mounts.root, "proc", 0755) != 0 || mkdirat(mounts.root, "dev", 0755) != 0 || mkdirat(mounts.root, "tmp", 01777) != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_ROOT);
        goto done;
    }
    // /dev: device nodes come as steps (binds of the host's, each checked),
    // the rest is links and the sandbox's own devpts and /dev/shm.
    mounts.dev = csb_tmpfs("0755", 1 << 20, 4096, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
    if (mounts.dev < 0 || move_mount(mounts.dev, "", mounts.root, "dev", MOVE_MOUNT_F_EMPTY_PATH) != 0
        || mkdirat(mounts.dev, "pts", 0755) != 0 || mkdirat(mounts.dev, "shm", 01777) != 0
        || symlinkat("pts/ptmx", mounts.dev, "ptmx") != 0 || symlinkat("/proc/self/fd", mounts.dev, "fd") != 0
        || symlinkat("/proc/self/fd/0", mounts.dev, "stdin") != 0 || symlinkat("/proc/self/fd/1", mounts.dev, "stdout") != 0
        || symlinkat("/proc/self/fd/2", mounts.dev, "stderr") != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_DEV);
        goto done;
    }
    mounts.tmp = csb_tmpfs("1777", keeper->tmp_size, keeper->tmp_inodes, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (mounts.tmp < 0 || move_mount(mounts.tmp, "", mounts.root, "tmp", MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_TMP);
        goto done;
    }
    for (int i = 0; i < keeper->view_steps_count; i++) {
        const struct csb_view_step *step = &keeper->view_steps[i];
        if (csb_view_step(mounts.root, step, i, report_fd) != 0) {
            csb_view_fail(failure, i);
            goto done;
        }
        // A file of the launcher's making: readable, as the system paths are.
        if (step->kind == CSB_VIEW_FILE && step->source != NULL) {
            int made = csb_open_beneath(mounts.root, step->target);
            int ruled = made >= 0 ? csb_rule_on(plan->ruleset_fd, made, keeper->proc_access & CSB_LANDLOCK_ACCESS_FS_READ_FILE) : -1;
            if (made >= 0) csb_close_saving_errno(made);
            if (ruled != 0) {
                csb_view_fail(failure, i);
                goto done;
            }
        }
    }
    if (keeper->grant_area && csb_grant_area_build(plan, keeper, mounts.root) != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_GRANT_AREA);
        goto done;
    }
    mounts.pts = csb_devpts();
    if (mounts.pts < 0 || move_mount(mounts.pts, "", mounts.dev, "pts", MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_DEV);
        goto done;
    }
    // A refused procfs only means less, as without namespaces: the command
    // then has no /proc (the Swift runtime finds no arguments, Python's
    // multiprocessing no semaphores), and /proc/self names nothing.
    mounts.proc = csb_procfs();
    if (mounts.proc >= 0 && move_mount(mounts.proc, "", mounts.root, "proc", MOVE_MOUNT_F_EMPTY_PATH) == 0) {
        if (csb_rule_on(plan->ruleset_fd, mounts.proc, keeper->proc_access) != 0) {
            csb_view_fail(failure, CSB_VIEW_FAILED_PROC);
            goto done;
        }
        *proc_mounted = 1;
    }
    // The old root goes entirely: no mount of the host's tree is left in
    // the namespace, above or below the new root.
    if (fchdir(mounts.root) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 || chdir("/") != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_PIVOT);
        goto done;
    }
    // The command may plant nothing at the top, nor in /dev.
    struct mount_attr read_only;
    memset(&read_only, 0, sizeof(read_only));
    read_only.attr_set = MOUNT_ATTR_RDONLY;
    if (mount_setattr(mounts.root, "", AT_EMPTY_PATH, &read_only, sizeof(read_only)) != 0
        || mount_setattr(mounts.dev, "", AT_EMPTY_PATH, &read_only, sizeof(read_only)) != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_READ_ONLY);
        goto done;
    }
    for (int i = 0; i < keeper->view_checks_count; i++) {
        const struct csb_view_check *check = &keeper->view_checks[i];
        int fd = open(check->path, O_PATH | O_CLOEXEC);
        int same = fd < 0 ? -1 : csb_is_inode(fd, check->device, check->inode);
        csb_close_saving_errno(fd);
        if (same != 1) {
            csb_view_fail(failure, CSB_VIEW_FAILED_CHECK);
            goto done;
        }
    }
    if (csb_view_rules(plan, keeper, &mounts) != 0) {
        csb_view_fail(failure, CSB_VIEW_FAILED_RULES);
        goto done;
    }
    result = 0;
done:
    csb_close_saving_errno(mounts.root);
    csb_close_saving_errno(mounts.dev);
    csb_close_saving_errno(mounts.tmp);
    csb_close_saving_errno(mounts.pts);
    csb_close_saving_errno(mounts.proc);
    return result;
}

int csb_view_pty(const struct csb_keeper_plan *keeper, int *master, int *terminal) {
    *master = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (*master < 0) return -1;
    int unlock = 0;
    if (ioctl(*master, TIOCSPTLCK, &unlock) != 0) goto failed;
    // The terminal side by the master, not by a name the command could race.
    *terminal = ioctl(*master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (*terminal < 0) goto failed;
    // The user's settings and size (tcsetattr is async-signal-safe).
    if (keeper->pty_modes != NULL && tcsetattr(*terminal, TCSANOW, (const struct termios *)keeper->pty_modes) != 0) goto failed_both;
    if (keeper->pty_window != NULL && ioctl(*master, TIOCSWINSZ, keeper->pty_window) != 0) goto failed_both;
    return 0;
failed_both:
    csb_close_saving_errno(*terminal);
failed:
    csb_close_saving_errno(*master);
    return -1;
}
