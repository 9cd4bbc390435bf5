// What tells one file or folder from another: handles, filesystems, birth times, mounts.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

int csb_name_to_handle(int fd, struct csb_file_handle *handle, int *mount_id, int *is_fid) {
    handle->handle_bytes = sizeof(handle->f_handle);
    *is_fid = 0;
    int rc = name_to_handle_at(fd, "", (struct file_handle *)handle, mount_id, AT_EMPTY_PATH);
    if (rc != 0 && errno == EOPNOTSUPP) {
        handle->handle_bytes = sizeof(handle->f_handle);
        rc = name_to_handle_at(fd, "", (struct file_handle *)handle, mount_id, AT_EMPTY_PATH | 0x200 /* AT_HANDLE_FID */);
        if (rc == 0) *is_fid = 1;
    }
    return rc;
}

int csb_name_to_handle_at(int dirfd, const char *name, struct csb_file_handle *handle, int *mount_id) {
    handle->handle_bytes = sizeof(handle->f_handle);
    return name_to_handle_at(dirfd, name, (struct file_handle *)handle, mount_id, 0);
}

int csb_open_by_handle(int mount_fd, struct csb_file_handle *handle) {
    return open_by_handle_at(mount_fd, (struct file_handle *)handle, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

int csb_filesystem_identity(int fd, uint64_t *fsid, uint64_t *type) {
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return -1;
    memcpy(fsid, &fs.f_fsid, sizeof(*fsid));
    *type = (uint64_t)fs.f_type;
    return 0;
}

int csb_birth_time(int fd, int64_t *seconds, uint32_t *nanoseconds) {
    struct statx st;
    if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_BTIME, &st) != 0) return -1;
    if (!(st.stx_mask & STATX_BTIME)) { errno = ENODATA; return -1; }
    *seconds = st.stx_btime.tv_sec;
    *nanoseconds = st.stx_btime.tv_nsec;
    return 0;
}

int csb_mount_facts(int fd, uint64_t *mount_id, int *is_mount_root, uint64_t *device, uint64_t *inode) {
    struct statx st;
    if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO | STATX_MNT_ID, &st) != 0) return -1;
    if (!(st.stx_mask & STATX_MNT_ID)) { errno = ENODATA; return -1; }
    *mount_id = st.stx_mnt_id;
    *is_mount_root = (st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) ? !!(st.stx_attributes & STATX_ATTR_MOUNT_ROOT) : -1;
    *device = (uint64_t)makedev(st.stx_dev_major, st.stx_dev_minor);
    *inode = st.stx_ino;
    return 0;
}
