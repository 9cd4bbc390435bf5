// `doctor`'s probe of the private view: a forked child takes the namespaces
// the keeper takes (mount and pid; in a user namespace of its own when not
// root, or when root is refused) and mounts a detached tmpfs, as the view's
// root is made, then exits. Nothing is attached: the child's namespaces end
// with it. Only async-signal-safe calls in the child.
#define _GNU_SOURCE 1
#include "claunch.h"
#include "internal.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

static void csb_probe_report(int fd, int step, int error) {
    int message[2] = {step, error};
    (void)!write(fd, message, sizeof message);
    _exit(step == 0 ? 0 : 1);
}

static void csb_probe_child(int fd, int user_namespace, uid_t uid, gid_t gid) {
    if (user_namespace) {
        if (unshare(CLONE_NEWUSER) != 0) csb_probe_report(fd, CSB_VIEW_PROBE_USER_NAMESPACE, errno);
        if ((csb_write_proc_file("/proc/self/setgroups", "deny", 4) != 0 && errno != ENOENT)
            || csb_map_own_id("/proc/self/uid_map", uid) != 0 || csb_map_own_id("/proc/self/gid_map", gid) != 0)
            csb_probe_report(fd, CSB_VIEW_PROBE_ID_MAP, errno);
    }
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) csb_probe_report(fd, CSB_VIEW_PROBE_NAMESPACES, errno);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) csb_probe_report(fd, CSB_VIEW_PROBE_MOUNT, errno);
    int context = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (context < 0 || fsconfig(context, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) csb_probe_report(fd, CSB_VIEW_PROBE_MOUNT, errno);
    int mounted = fsmount(context, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (mounted < 0) csb_probe_report(fd, CSB_VIEW_PROBE_MOUNT, errno);
    csb_probe_report(fd, 0, 0);
}

int csb_probe_private_view(int user_namespace, int *_Nonnull step, int *_Nonnull error) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return -1;
    uid_t uid = getuid();
    gid_t gid = getgid();
    pid_t pid = fork();
    if (pid < 0) {
        int saved = errno;
        close(pipefd[0]);
        close(pipefd[1]);
        errno = saved;
        return -1;
    }
    if (pid == 0) {
        close(pipefd[0]);
        csb_probe_child(pipefd[1], user_namespace, uid, gid);
    }
    close(pipefd[1]);
    int message[2] = {-1, 0};
    ssize_t got;
    do { got = read(pipefd[0], message, sizeof message); } while (got < 0 && errno == EINTR);
    close(pipefd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (got != (ssize_t)sizeof message) {
        *step = CSB_VIEW_PROBE_NAMESPACES;
        *error = EIO;  // the child died before it could say: counted as refused
        return 0;
    }
    *step = message[0];
    *error = message[1];
    return 0;
}
