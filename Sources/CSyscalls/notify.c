// seccomp user notification, and the attribute calls the supervisor makes for the child.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

_Static_assert(sizeof(struct csb_seccomp_data) == sizeof(struct seccomp_data), "seccomp_data");
_Static_assert(sizeof(struct csb_seccomp_notif) == sizeof(struct seccomp_notif), "seccomp_notif");
_Static_assert(sizeof(struct csb_seccomp_notif_resp) == sizeof(struct seccomp_notif_resp), "seccomp_notif_resp");
_Static_assert(offsetof(struct csb_seccomp_notif, data) == offsetof(struct seccomp_notif, data), "seccomp_notif.data");

int csb_seccomp_supported(void) {
    return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 ? -1 : 0;
}

int csb_seccomp_notify_supported(void) {
    struct seccomp_notif_sizes sizes;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0) return -1;
    // RECV copies the kernel's whole struct: refuse a kernel whose struct grew.
    if (sizes.seccomp_notif != sizeof(struct seccomp_notif) ||
        sizes.seccomp_notif_resp < sizeof(struct seccomp_notif_resp)) {
        errno = EOPNOTSUPP;
        return -1;
    }
    return 0;
}

int csb_seccomp_notify_receive(int listener, struct csb_seccomp_notif *notif) {
    memset(notif, 0, sizeof(*notif));  // the kernel insists on a zeroed buffer
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, notif);
}

int csb_seccomp_notify_id_valid(int listener, uint64_t id) {
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id);
}

int csb_seccomp_notify_respond(int listener, const struct csb_seccomp_notif_resp *resp) {
    return ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp);
}

// MARK: The supervisor: attribute reads and the child's memory

ssize_t csb_getxattr_fd(int fd, const char *name, void *value, size_t size) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return getxattr(path, name, value, size);
}

ssize_t csb_listxattr_fd(int fd, char *list, size_t size) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return listxattr(path, list, size);
}

int csb_seccomp_notify_sync_wakeup(int listener) {
    // Not in Debian 12's linux/seccomp.h: SECCOMP_IOW(4, __u64) and flag 1.
    const unsigned long set_flags = _IOW('!', 4, uint64_t);
    uint64_t flags = 1;  // SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
    return ioctl(listener, set_flags, flags);
}
