// Live grants: folders attached to a running sandbox's private view.
//
// The keeper mounts a tmpfs, the grant area, read-only at CSB_GRANT_AREA in
// the view, with a Landlock rule in the command's layer giving every right
// a grant may need, and hands the launcher the area's writable mount and an
// O_PATH of it as attached; it keeps neither. Nothing more is made at launch.
// The grant helper is forked by the launcher only when a folder is first
// attached or detached: outside the sandbox's pid namespace and every
// Landlock domain (a layer that handles a file right refuses mount calls),
// so the command can neither see, signal nor trace it. Where the sandbox has
// a user namespace the helper joins it and makes a mount namespace of its
// own there, a copy of the host's tree it may clone from. For each folder
// the launcher sends (path, device and inode of a descriptor it verified and
// holds open) the helper clones the folder in that namespace, checks the
// clone is that very inode, sets nosuid, nodev, read-only, noexec and
// private propagation as asked while it is detached, enters the view (the
// keeper's mount namespace, through its pidfd), makes the mount point
// through the writable area and moves the clone there. The command, without
// capabilities, cannot change the clone's flags, nor write in the area.
//
// Only async-signal-safe calls and raw syscalls: the area is built in a fork
// of the launcher, and the helper is one.
#define _GNU_SOURCE 1
#include "internal.h"

#include <limits.h>
#include <linux/openat2.h>
#include <time.h>

// The keeper's, from csb_grant_area_build until csb_grant_area_send.
static struct {
    int area;       // the area's writable mount, detached
    int area_view;  // the area as attached in the view (O_PATH)
} csb_area = { -1, -1 };

static void csb_grant_close(int *fd) {
    int saved = errno;
    if (*fd >= 0) close(*fd);
    *fd = -1;
    errno = saved;
}

// `name` beneath `parent` as a folder of the same mount (made when missing),
// no link followed: a folder of the view's own tmpfs, never a bind's.
static int csb_grant_folder(int parent, const char *name) {
    if (mkdirat(parent, name, 0755) != 0 && errno != EEXIST) return -1;
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH | RESOLVE_NO_XDEV;
    return (int)syscall(SYS_openat2, parent, name, &how, sizeof(how));
}

int csb_grant_area_build(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper, int root) {
    int run = -1, ours = -1, clone = -1, context = -1, result = -1;
    run = csb_grant_folder(root, "run");
    if (run < 0) goto done;
    ours = csb_grant_folder(run, "sandboxed-run");
    if (ours < 0 || mkdirat(ours, "grants", 0755) != 0) goto done;
    context = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (context < 0 || fsconfig(context, FSCONFIG_SET_STRING, "mode", "0755", 0) != 0
        || fsconfig(context, FSCONFIG_SET_STRING, "size", "65536", 0) != 0
        || fsconfig(context, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) goto done;
    csb_area.area = fsmount(context, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (csb_area.area < 0) goto done;
    // The command's copy: read-only before it is attached.
    clone = open_tree(csb_area.area, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    struct mount_attr read_only;
    memset(&read_only, 0, sizeof(read_only));
    read_only.attr_set = MOUNT_ATTR_RDONLY;
    if (clone < 0 || mount_setattr(clone, "", AT_EMPTY_PATH, &read_only, sizeof(read_only)) != 0
        || move_mount(clone, "", ours, "grants", MOVE_MOUNT_F_EMPTY_PATH) != 0) goto done;
    csb_area.area_view = openat(ours, "grants", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (csb_area.area_view < 0) goto done;
    // Every grant lies beneath the area's root, whose inode the rules bind to.
    if (plan->ruleset_fd >= 0 && keeper->grant_area_access != 0
        && csb_landlock_add_path_rule(plan->ruleset_fd, csb_area.area_view, keeper->grant_area_access) != 0) goto done;
    // Renames within one grant need REFER in every layer; between grants
    // (different mounts) the kernel refuses them (EXDEV) before any layer.
    for (int i = 0; i < plan->refer_rulesets_count; i++) {
        if (csb_landlock_add_path_rule(plan->refer_rulesets[i], csb_area.area_view, CSB_LANDLOCK_ACCESS_FS_REFER) != 0) goto done;
    }
    result = 0;
done:
    csb_grant_close(&run);
    csb_grant_close(&ours);
    csb_grant_close(&clone);
    csb_grant_close(&context);
    return result;
}

// Closes every descriptor but `keep` (any order, at most 8).
static void csb_grant_close_except(const int *keep, int count) {
    int sorted[8];
    int n = 0;
    for (int i = 0; i < count && n < 8; i++) {
        if (keep[i] < 0) continue;
        int at = n++;
        while (at > 0 && sorted[at - 1] > keep[i]) { sorted[at] = sorted[at - 1]; at--; }
        sorted[at] = keep[i];
    }
    unsigned int low = 0;
    for (int i = 0; i < n; i++) {
        if ((unsigned int)sorted[i] > low) syscall(SYS_close_range, low, (unsigned int)sorted[i] - 1, 0);
        low = (unsigned int)sorted[i] + 1;
    }
    syscall(SYS_close_range, low, ~0U, 0);
}

static int csb_grant_name_valid(const char name[16]) {
    if (name[0] == '\0') return 0;
    for (int i = 0; i < 16; i++) {
        if (name[i] == '\0') return 1;
        if (name[i] < '0' || name[i] > '9') return 0;
    }
    return 0;
}

int csb_grant_area_send(int report_fd) {
    csb_report_send(report_fd, CSB_KEEPER_GRANT_AREA, 0, 0, csb_area.area);
    csb_report_send(report_fd, CSB_KEEPER_GRANT_AREA, 0, 1, csb_area.area_view);
    // Only the launcher holds them now: the command is forked after this.
    csb_grant_close(&csb_area.area);
    csb_grant_close(&csb_area.area_view);
    return 0;
}

// The helper's own (a fork of the launcher: the launcher's copy is never used).
static struct {
    int keeper;     // the keeper's pidfd: its mount namespace is the view's
    int host;       // a mount namespace that sees the host's tree
    int area;
    int area_view;
    int proc_self;  // the helper's /proc/self in the host's procfs (the view's /proc is the sandbox's pid namespace's)
    int failure;    // errno of the helper's own set-up, answered to every request
} csb_helper = { -1, -1, -1, -1, -1, 0 };

static void csb_grant_fail(struct csb_grant_reply *reply, int step) {
    reply->error = errno != 0 ? errno : EIO;
    reply->step = step;
}

// Enters the view; a helper that cannot is of no further use: the sandbox
// ended (ESRCH from the keeper's pidfd), or something is badly wrong.
static int csb_grant_enter_view(struct csb_grant_reply *reply) {
    if (setns(csb_helper.keeper, CLONE_NEWNS) == 0) return 0;
    csb_grant_fail(reply, CSB_GRANT_STEP_VIEW);
    return -1;
}

static void csb_grant_attach(const struct csb_grant_request *request, struct csb_grant_reply *reply) {
    if (csb_helper.area < 0 || csb_helper.area_view < 0) {
        errno = ENOTSUP;  // no area in this sandbox: only launch-time grants to detach
        csb_grant_fail(reply, CSB_GRANT_STEP_REQUEST);
        return;
    }
    if (setns(csb_helper.host, CLONE_NEWNS) != 0) { csb_grant_fail(reply, CSB_GRANT_STEP_HOST); return; }
    // The launcher's path, in the host's tree: a link put on the way since
    // leads to another inode, which the comparison refuses.
    int clone = open_tree(AT_FDCWD, request->path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW | AT_RECURSIVE);
    if (clone < 0) {
        csb_grant_fail(reply, CSB_GRANT_STEP_CLONE);
    } else {
        struct stat status;
        if (fstat(clone, &status) != 0) {
            csb_grant_fail(reply, CSB_GRANT_STEP_IDENTITY);
        } else if ((uint64_t)status.st_dev != request->device || (uint64_t)status.st_ino != request->inode || !S_ISDIR(status.st_mode)) {
            errno = ESTALE;
            csb_grant_fail(reply, CSB_GRANT_STEP_IDENTITY);
        } else {
            // Set while detached: the command never sees the folder otherwise.
            // Flags are only ever added (a read-only host mount stays so).
            // Private: nothing mounted on the host beneath the folder later
            // shows up in the view, and nothing propagates back.
            struct mount_attr attributes;
            memset(&attributes, 0, sizeof(attributes));
            attributes.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                | ((request->flags & CSB_GRANT_WRITABLE) ? 0 : MOUNT_ATTR_RDONLY)
                | ((request->flags & CSB_GRANT_EXECUTE) ? 0 : MOUNT_ATTR_NOEXEC);
            attributes.propagation = MS_PRIVATE;
            if (mount_setattr(clone, "", AT_EMPTY_PATH | AT_RECURSIVE, &attributes, sizeof(attributes)) != 0) {
                csb_grant_fail(reply, CSB_GRANT_STEP_FLAGS);
            }
        }
    }
    if (reply->error == 0 && csb_grant_enter_view(reply) == 0) {
        if (mkdirat(csb_helper.area, request->name, 0755) != 0) {
            csb_grant_fail(reply, CSB_GRANT_STEP_MOUNT_POINT);
        } else if (move_mount(clone, "", csb_helper.area_view, request->name, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
            csb_grant_fail(reply, CSB_GRANT_STEP_ATTACH);
            unlinkat(csb_helper.area, request->name, AT_REMOVEDIR);
        }
    }
    if (clone >= 0) close(clone);
}

// Taking a folder away never detaches it lazily: the kernel refuses a
// plain umount (EBUSY) while anything still holds the mount (a descriptor
// or working directory at any depth, a file open or mapped there, a
// descriptor in flight in a socket), and a folder detached under what the
// command holds would still show its names, sizes, owners, link targets and
// attributes (Landlock mediates none of those reads). Held, it stays
// attached and the reply says so: the launcher refuses the stop, or ends the
// sandbox for a revocation. Mounts beneath it (a grant nested inside, a
// mount of the host's copied with the folder) go first, the same way.

// The mount id (as in mountinfo) of what `fd` is, or of `name` beneath it
// (the last name not followed): 0 on failure.
static unsigned long long csb_grant_mount_id(int fd, const char *name) {
    struct statx status;
    memset(&status, 0, sizeof(status));
    int flags = name[0] == '\0' ? AT_EMPTY_PATH : AT_SYMLINK_NOFOLLOW;
    if (statx(fd, name, flags | AT_STATX_DONT_SYNC, STATX_MNT_ID, &status) != 0) return 0;
    if (!(status.stx_mask & STATX_MNT_ID)) { errno = ENOTSUP; return 0; }
    return status.stx_mnt_id;
}

// Unmounts the mount whose root `*mount_fd` is, never lazily; closes
// `*mount_fd` first (a descriptor of it would keep it busy). Its mount
// point is named from its parent folder, reached by `..` from the root: a
// mount point cannot be renamed, removed or replaced while mounted, so
// that name leads nowhere else, whatever the command renamed around it.
// EINVAL: not attached in the view (a mount it lay in went before).
static int csb_grant_umount_exactly(int *mount_fd, int *step) {
    *step = CSB_GRANT_STEP_DETACH;
    unsigned long long id = csb_grant_mount_id(*mount_fd, "");
    if (id == 0) return -1;
    int parent = openat(*mount_fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0) return -1;
    int result = -1;
    if (csb_grant_mount_id(parent, "") == id) {
        errno = EINVAL;  // `..` of a detached mount's root is itself
        goto done;
    }
    // The mount point's name: the last component of the root's path in the view.
    char link[24] = "fd/";
    {
        char digits[12];
        int n = 0;
        unsigned int value = (unsigned int)*mount_fd;
        do { digits[n++] = (char)('0' + value % 10); value /= 10; } while (value != 0 && n < 11);
        for (int i = 0; i < n; i++) link[3 + i] = digits[n - 1 - i];
        link[3 + n] = '\0';
    }
    static char path[PATH_MAX + 1];
    ssize_t length = readlinkat(csb_helper.proc_self, link, path, PATH_MAX);
    if (length <= 1 || path[0] != '/') {
        if (length >= 0) errno = EINVAL;
        goto done;
    }
    path[length] = '\0';
    const char *name = strrchr(path, '/') + 1;
    if (name[0] == '\0' || strcmp(name, "..") == 0 || strcmp(name, ".") == 0 || csb_grant_mount_id(parent, name) != id) {
        errno = EINVAL;
        goto done;
    }
    csb_grant_close(mount_fd);
    if (fchdir(parent) != 0) goto done;
    // Something of ours may hold it for a moment (the launcher's copy of a
    // launch-time grant's mount, closed as it was sent): asked again for 50 ms.
    for (int attempt = 0; ; attempt++) {
        if (umount2(name, UMOUNT_NOFOLLOW) == 0) { result = 0; break; }
        if (errno != EBUSY || attempt == 5) {
            if (errno == EBUSY) *step = CSB_GRANT_STEP_HELD;
            break;
        }
        struct timespec pause = { 0, 10 * 1000 * 1000 };
        nanosleep(&pause, NULL);
    }
done:;
    int saved = errno;
    (void)chdir("/");
    close(parent);
    errno = saved;
    return result;
}

// Unescapes a mountinfo path field (\040 and the like) in place; its end.
static char *csb_grant_mountinfo_field(char *field) {
    char *in = field, *out = field;
    while (*in != '\0' && *in != ' ' && *in != '\n') {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' && in[3] >= '0' && in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 4;
        } else {
            *out++ = *in++;
        }
    }
    char *end = in;
    *out = '\0';
    return end;
}

// A decimal number after spaces; *cursor moves past it (0: none).
static unsigned long long csb_grant_number(char **cursor) {
    char *at = *cursor;
    while (*at == ' ') at++;
    unsigned long long value = 0;
    int digits = 0;
    while (*at >= '0' && *at <= '9' && digits < 19) value = value * 10 + (unsigned long long)(*at++ - '0'), digits++;
    *cursor = at;
    return digits == 0 || *at != ' ' ? 0 : value;
}

#define CSB_GRANT_MOUNTS_MAX 4096
static char csb_grant_mountinfo[1 << 20];
static struct { unsigned long long id, parent; char *point; int depth; } csb_grant_mounts[CSB_GRANT_MOUNTS_MAX];

// Unmounts the tree whose root `*mount_fd` is, in the view (entered), never
// lazily: mounts beneath it first, deepest first, each reached by its path
// in mountinfo with no link followed and checked to be that mount (a path
// the command changed meanwhile is refused: the sandbox ends). Consumes
// `*mount_fd`. Fails with *step CSB_GRANT_STEP_HELD when one is held.
static int csb_grant_umount_tree(int *mount_fd, int *step) {
    *step = CSB_GRANT_STEP_DETACH;
    unsigned long long root = csb_grant_mount_id(*mount_fd, "");
    if (root == 0) return -1;
    int info = openat(csb_helper.proc_self, "mountinfo", O_RDONLY | O_CLOEXEC);
    if (info < 0) return -1;
    size_t used = 0;
    for (;;) {
        if (used == sizeof(csb_grant_mountinfo) - 1) { close(info); errno = E2BIG; return -1; }
        ssize_t got = read(info, csb_grant_mountinfo + used, sizeof(csb_grant_mountinfo) - 1 - used);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { int saved = errno; close(info); errno = saved; return -1; }
        if (got == 0) break;
        used += (size_t)got;
    }
    close(info);
    csb_grant_mountinfo[used] = '\0';
    int count = 0;
    for (char *line = csb_grant_mountinfo; *line != '\0'; ) {
        char *next = strchr(line, '\n');
        if (next == NULL) { errno = EPROTO; return -1; }
        *next = '\0';
        if (count == CSB_GRANT_MOUNTS_MAX) { errno = E2BIG; return -1; }
        char *end = line;
        unsigned long long id = csb_grant_number(&end);
        unsigned long long parent = csb_grant_number(&end);
        // maj:min, root, then the mount point.
        char *field = end;
        for (int skip = 0; skip < 2 && field != NULL; skip++) field = strchr(field + 1, ' ');
        if (field == NULL || id == 0 || parent == 0) { errno = EPROTO; return -1; }
        csb_grant_mounts[count].id = id;
        csb_grant_mounts[count].parent = parent;
        csb_grant_mounts[count].point = field + 1;
        csb_grant_mountinfo_field(field + 1);
        csb_grant_mounts[count].depth = -1;
        count++;
        line = next + 1;
    }
    // Depth beneath the root (-1: not beneath it); a cycle cannot occur, but is bounded.
    int found = 0;
    for (int i = 0; i < count; i++) {
        unsigned long long at = csb_grant_mounts[i].id;
        for (int depth = 0; depth < count && at != 0; depth++) {
            if (at == root) { csb_grant_mounts[i].depth = depth; break; }
            unsigned long long up = 0;
            for (int j = 0; j < count; j++) if (csb_grant_mounts[j].id == at) { up = csb_grant_mounts[j].parent; break; }
            if (up == at) break;
            at = up;
        }
        if (csb_grant_mounts[i].depth > 0) found++;
    }
    for (int depth = count; depth > 0 && found > 0; depth--) {
        for (int i = 0; i < count; i++) {
            if (csb_grant_mounts[i].depth != depth) continue;
            found--;
            struct open_how how;
            memset(&how, 0, sizeof(how));
            how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
            how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
            int child = (int)syscall(SYS_openat2, AT_FDCWD, csb_grant_mounts[i].point, &how, sizeof(how));
            if (child < 0) return -1;
            if (csb_grant_mount_id(child, "") != csb_grant_mounts[i].id) {
                close(child);
                errno = ESTALE;  // the path leads elsewhere now
                return -1;
            }
            if (csb_grant_umount_exactly(&child, step) != 0) {
                csb_grant_close(&child);
                return -1;
            }
        }
    }
    return csb_grant_umount_exactly(mount_fd, step);
}

static void csb_grant_detach(const struct csb_grant_request *request, struct csb_grant_reply *reply) {
    if (csb_helper.area < 0) {
        errno = ENOTSUP;
        csb_grant_fail(reply, CSB_GRANT_STEP_REQUEST);
        return;
    }
    if (csb_grant_enter_view(reply) != 0) return;
    // The area is read-only to the command: the name is ours.
    int mount_fd = openat(csb_helper.area_view, request->name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int step = CSB_GRANT_STEP_DETACH;
    if (mount_fd < 0 || csb_grant_mount_id(mount_fd, "") == csb_grant_mount_id(csb_helper.area_view, "")) {
        if (mount_fd >= 0) errno = EINVAL;  // a folder of the area, nothing mounted on it
        csb_grant_close(&mount_fd);
        csb_grant_fail(reply, step);
        return;
    }
    if (csb_grant_umount_tree(&mount_fd, &step) != 0) {
        csb_grant_close(&mount_fd);
        csb_grant_fail(reply, step);
        return;
    }
    unlinkat(csb_helper.area, request->name, AT_REMOVEDIR);
}

// A launch-time grant: the mount whose root `*mount_fd` is (the keeper's
// clone, as attached in the view; the launcher closed its copy as it sent
// it). EINVAL: the mount is no longer in the view.
static void csb_grant_detach_mount(int *mount_fd, struct csb_grant_reply *reply) {
    if (*mount_fd < 0) {
        errno = EBADF;
        csb_grant_fail(reply, CSB_GRANT_STEP_REQUEST);
        return;
    }
    if (csb_grant_enter_view(reply) != 0) return;
    // Read-only first, for the moment it takes the launcher to end a
    // sandbox that still holds it: nothing can be written, made or
    // removed through it any more. The kernel refuses (EBUSY) while a
    // file there is open for writing: held all the same.
    struct mount_attr read_only;
    memset(&read_only, 0, sizeof(read_only));
    read_only.attr_set = MOUNT_ATTR_RDONLY;
    (void)mount_setattr(*mount_fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &read_only, sizeof(read_only));
    int step = CSB_GRANT_STEP_DETACH;
    if (csb_grant_umount_tree(mount_fd, &step) != 0) csb_grant_fail(reply, step);
}

// One request, and the descriptor passed with it (-1: none).
static ssize_t csb_grant_receive(int socket_fd, struct csb_grant_request *request, int *passed) {
    struct iovec iov = { .iov_base = request, .iov_len = sizeof(*request) };
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof(control.buf);
    *passed = -1;
    ssize_t got = recvmsg(socket_fd, &msg, MSG_TRUNC | MSG_CMSG_CLOEXEC);
    if (got < 0) return got;
    for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg != NULL; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS && cmsg->cmsg_len == CMSG_LEN(sizeof(int))) {
            memcpy(passed, CMSG_DATA(cmsg), sizeof(int));
        }
    }
    return got;
}

__attribute__((noreturn)) static void csb_grant_serve(int socket_fd) {
    for (;;) {
        struct csb_grant_request request;
        int passed = -1;
        ssize_t got = csb_grant_receive(socket_fd, &request, &passed);
        if (got == 0) _exit(0);  // the launcher closed its end: the sandbox ended
        if (got < 0) {
            if (errno == EINTR) continue;
            _exit(1);
        }
        struct csb_grant_reply reply = { 0, 0, (size_t)got >= sizeof(request.operation) + sizeof(request.flags) + sizeof(request.sequence) ? request.sequence : 0 };
        errno = 0;
        if (csb_helper.failure != 0) {
            errno = csb_helper.failure;
            csb_grant_fail(&reply, CSB_GRANT_STEP_START);
        } else if ((size_t)got != sizeof(request) || !csb_grant_name_valid(request.name)) {
            errno = EPROTO;
            csb_grant_fail(&reply, CSB_GRANT_STEP_REQUEST);
        } else if (request.operation == CSB_GRANT_ATTACH && request.path[0] == '/' && memchr(request.path, '\0', sizeof(request.path)) != NULL) {
            csb_grant_attach(&request, &reply);
        } else if (request.operation == CSB_GRANT_DETACH) {
            csb_grant_detach(&request, &reply);
        } else if (request.operation == CSB_GRANT_DETACH_MOUNT) {
            csb_grant_detach_mount(&passed, &reply);
        } else {
            errno = EPROTO;
            csb_grant_fail(&reply, CSB_GRANT_STEP_REQUEST);
        }
        if (passed >= 0) close(passed);
        while (send(socket_fd, &reply, sizeof(reply), MSG_NOSIGNAL) < 0) {
            if (errno != EINTR) _exit(1);
        }
    }
}

// The helper's set-up: 0, or errno.
static int csb_grant_helper_setup(int user_namespace) {
    // Not dumpable: no process of the command's uid may read or trace it.
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return errno;
    prctl(PR_SET_NAME, "sandbox-grants", 0, 0, 0);
    // The launcher's thread that forked may serve the command's calls with
    // no effective capabilities (MetadataSupervisor): the helper raises what it is permitted.
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data) != 0) return errno;
    data[0].effective = data[0].permitted;
    data[1].effective = data[1].permitted;
    if (syscall(SYS_capset, &header, data) != 0) return errno;
    if (user_namespace) {
        // Capabilities in the sandbox's user namespace, and a mount
        // namespace owned by it that still sees the host's tree: the
        // host's own is not ours to clone from.
        if (setns(csb_helper.keeper, CLONE_NEWUSER) != 0 || unshare(CLONE_NEWNS) != 0) return errno;
    }
    csb_helper.host = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (csb_helper.host < 0) return errno;
    csb_helper.proc_self = open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC);
    return csb_helper.proc_self < 0 ? errno : 0;
}

int csb_grant_helper_spawn(int keeper_pidfd, int user_namespace, int area, int area_view, int socket_fd, int *pidfd) {
    // Every signal blocked across the fork: no handler of the launcher's
    // runs in the helper, which keeps them blocked (it ends when its socket does).
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int child_pidfd = -1;
    pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_PIDFD | SIGCHLD), NULL, &child_pidfd, NULL, 0UL);
    if (pid == 0) {
        int keep[4] = { keeper_pidfd, area, area_view, socket_fd };
        csb_grant_close_except(keep, 4);
        csb_helper.keeper = keeper_pidfd;
        csb_helper.area = area;
        csb_helper.area_view = area_view;
        csb_helper.failure = csb_grant_helper_setup(user_namespace);
        csb_grant_serve(socket_fd);
    }
    int saved = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        errno = saved;
        return -1;
    }
    *pidfd = child_pidfd;
    return 0;
}

ssize_t csb_grant_send(int socket_fd, const struct csb_grant_request *request, int passed_fd) {
    return csb_send_with_fd(socket_fd, request, sizeof(*request), passed_fd);
}
