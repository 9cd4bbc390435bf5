// Live grants: folders attached to a running sandbox's private view.
//
// The keeper keeps a descriptor of the mount namespace it was cloned into
// (a copy of the host's tree, owned by the sandbox's user namespace) and
// builds the view in a new one. In the view a tmpfs, the grant area, is
// attached read-only at CSB_GRANT_AREA, with a Landlock rule in the
// command's layer giving every right a grant may need; the writable mount of
// that tmpfs stays with the grant helper only. The helper is a fork of the
// keeper made before the keeper enters its Landlock layer (a layer that
// handles a file right refuses mount calls), in the sandbox's user, pid and
// mount namespaces. For each folder the launcher sends (path, device and
// inode of a descriptor it verified and holds open) the helper enters the
// host's namespace, clones the folder there, checks the clone is that very
// inode, sets nosuid, nodev, read-only and noexec as asked while it is
// detached, enters the view again, makes the mount point through the
// writable area and moves the clone there. The command, without
// capabilities, cannot change the clone's flags, nor write in the area.
//
// Only async-signal-safe calls and raw syscalls: this is a fork of the launcher.
#define _GNU_SOURCE 1
#include "internal.h"

#include <linux/openat2.h>

// The keeper's (and then the helper's) own: this is a fork, the launcher's copy is never used.
static struct {
    int host;       // the namespace the keeper was cloned into: it still sees the host's tree
    int view;       // the view's namespace
    int area;       // the area's writable mount, detached: only the helper makes names there
    int area_view;  // the area as attached in the view (O_PATH)
    int lifeline;   // the keeper's end of a pipe: the helper exits when it closes
} csb_grants = { -1, -1, -1, -1, -1 };

static void csb_grant_close(int *fd) {
    int saved = errno;
    if (*fd >= 0) close(*fd);
    *fd = -1;
    errno = saved;
}

int csb_grant_area_prepare(void) {
    csb_grants.host = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    if (csb_grants.host < 0) return -1;
    // The view is built in a copy: the namespace above keeps the host's
    // tree (made private by the keeper already, so nothing propagates).
    if (unshare(CLONE_NEWNS) != 0) return -1;
    csb_grants.view = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    return csb_grants.view < 0 ? -1 : 0;
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
    csb_grants.area = fsmount(context, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (csb_grants.area < 0) goto done;
    // The command's copy: read-only before it is attached.
    clone = open_tree(csb_grants.area, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    struct mount_attr read_only;
    memset(&read_only, 0, sizeof(read_only));
    read_only.attr_set = MOUNT_ATTR_RDONLY;
    if (clone < 0 || mount_setattr(clone, "", AT_EMPTY_PATH, &read_only, sizeof(read_only)) != 0
        || move_mount(clone, "", ours, "grants", MOVE_MOUNT_F_EMPTY_PATH) != 0) goto done;
    csb_grants.area_view = openat(ours, "grants", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (csb_grants.area_view < 0) goto done;
    // Every grant lies beneath the area's root, whose inode the rules bind to.
    if (plan->ruleset_fd >= 0 && keeper->grant_area_access != 0
        && csb_landlock_add_path_rule(plan->ruleset_fd, csb_grants.area_view, keeper->grant_area_access) != 0) goto done;
    // Renames within one grant need REFER in every layer; between grants
    // (different mounts) the kernel refuses them (EXDEV) before any layer.
    for (int i = 0; i < plan->refer_rulesets_count; i++) {
        if (csb_landlock_add_path_rule(plan->refer_rulesets[i], csb_grants.area_view, CSB_LANDLOCK_ACCESS_FS_REFER) != 0) goto done;
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

static void csb_grant_fail(struct csb_grant_reply *reply, int step) {
    reply->error = errno != 0 ? errno : EIO;
    reply->step = step;
}

static void csb_grant_attach(const struct csb_grant_request *request, struct csb_grant_reply *reply) {
    if (setns(csb_grants.host, CLONE_NEWNS) != 0) { csb_grant_fail(reply, CSB_GRANT_STEP_HOST); return; }
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
            struct mount_attr attributes;
            memset(&attributes, 0, sizeof(attributes));
            attributes.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                | ((request->flags & CSB_GRANT_WRITABLE) ? 0 : MOUNT_ATTR_RDONLY)
                | ((request->flags & CSB_GRANT_EXECUTE) ? 0 : MOUNT_ATTR_NOEXEC);
            if (mount_setattr(clone, "", AT_EMPTY_PATH | AT_RECURSIVE, &attributes, sizeof(attributes)) != 0) {
                csb_grant_fail(reply, CSB_GRANT_STEP_FLAGS);
            }
        }
    }
    // Back in the view whatever happened; a helper stuck in the host's
    // namespace would serve nothing right: it ends, and the launcher hears so.
    if (setns(csb_grants.view, CLONE_NEWNS) != 0) {
        csb_grant_fail(reply, CSB_GRANT_STEP_VIEW);
        _exit(1);
    }
    if (reply->error != 0) {
        if (clone >= 0) close(clone);
        return;
    }
    if (mkdirat(csb_grants.area, request->name, 0755) != 0) {
        csb_grant_fail(reply, CSB_GRANT_STEP_MOUNT_POINT);
    } else if (move_mount(clone, "", csb_grants.area_view, request->name, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
        csb_grant_fail(reply, CSB_GRANT_STEP_ATTACH);
        unlinkat(csb_grants.area, request->name, AT_REMOVEDIR);
    }
    close(clone);
}

static void csb_grant_detach(const struct csb_grant_request *request, struct csb_grant_reply *reply) {
    char target[sizeof(CSB_GRANT_AREA) + 17] = CSB_GRANT_AREA "/";
    memcpy(target + sizeof(CSB_GRANT_AREA), request->name, strlen(request->name) + 1);
    // Descriptors already open in it keep working; new lookups find the empty mount point, then nothing.
    if (umount2(target, MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
        csb_grant_fail(reply, CSB_GRANT_STEP_DETACH);
        return;
    }
    unlinkat(csb_grants.area, request->name, AT_REMOVEDIR);
}

__attribute__((noreturn)) static void csb_grant_serve(int socket_fd, int lifeline) {
    for (;;) {
        struct pollfd fds[2] = { { .fd = socket_fd, .events = POLLIN }, { .fd = lifeline, .events = POLLIN } };
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            _exit(1);
        }
        if (fds[1].revents != 0) _exit(0);  // the keeper is ending the sandbox
        if (!(fds[0].revents & POLLIN)) _exit(0);  // the launcher is gone
        struct csb_grant_request request;
        ssize_t got = recv(socket_fd, &request, sizeof(request), MSG_TRUNC);
        if (got == 0) _exit(0);
        if (got < 0) {
            if (errno == EINTR) continue;
            _exit(1);
        }
        struct csb_grant_reply reply = { 0, 0, (size_t)got >= sizeof(request.operation) + sizeof(request.flags) + sizeof(request.sequence) ? request.sequence : 0 };
        errno = 0;
        if ((size_t)got != sizeof(request) || !csb_grant_name_valid(request.name)) {
            errno = EPROTO;
            csb_grant_fail(&reply, CSB_GRANT_STEP_REQUEST);
        } else if (request.operation == CSB_GRANT_ATTACH && request.path[0] == '/' && memchr(request.path, '\0', sizeof(request.path)) != NULL) {
            csb_grant_attach(&request, &reply);
        } else if (request.operation == CSB_GRANT_DETACH) {
            csb_grant_detach(&request, &reply);
        } else {
            errno = EPROTO;
            csb_grant_fail(&reply, CSB_GRANT_STEP_REQUEST);
        }
        while (send(socket_fd, &reply, sizeof(reply), MSG_NOSIGNAL) < 0) {
            if (errno != EINTR) _exit(1);
        }
    }
}

int csb_grant_helper_start(const struct csb_keeper_plan *keeper) {
    int lifeline[2];
    if (pipe2(lifeline, O_CLOEXEC) != 0) return -1;
    pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, 0UL);
    if (pid < 0) {
        int saved = errno;
        close(lifeline[0]);
        close(lifeline[1]);
        errno = saved;
        return -1;
    }
    if (pid == 0) {
        // Outside every Landlock domain of the sandbox's (mounts need that),
        // so the command, nested in the keeper's, can neither signal nor
        // trace it. It dies with the keeper.
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        prctl(PR_SET_NAME, "sandbox-grants", 0, 0, 0);
        int keep[6] = { keeper->grant_helper_fd, csb_grants.host, csb_grants.view, csb_grants.area, csb_grants.area_view, lifeline[0] };
        csb_grant_close_except(keep, 6);
        csb_grant_serve(keeper->grant_helper_fd, lifeline[0]);
    }
    close(lifeline[0]);
    // The keeper needs none of them: only the helper may hold the host's tree and the writable area.
    close(keeper->grant_helper_fd);
    csb_grant_close(&csb_grants.host);
    csb_grant_close(&csb_grants.view);
    csb_grant_close(&csb_grants.area);
    csb_grant_close(&csb_grants.area_view);
    csb_grants.lifeline = lifeline[1];
    return lifeline[1];
}

void csb_grant_helper_stop(void) {
    csb_grant_close(&csb_grants.lifeline);
}

int csb_grant_lifeline(void) {
    return csb_grants.lifeline;
}
