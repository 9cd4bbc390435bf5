// Opening, changing and locking files. No retry here: callers retry EINTR in one place.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

#include <linux/fs.h>
#include <sys/vfs.h>

int csb_open_path(int dirfd, const char *path, int follow_symlinks) {
    int flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    return openat(dirfd, path, flags);
}

int csb_openat2_path(int dirfd, const char *path, int follow_symlinks) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    how.resolve = RESOLVE_NO_MAGICLINKS;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int csb_openat2_path_in_root(int root, const char *path, int follow_symlinks) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    how.resolve = RESOLVE_NO_MAGICLINKS | RESOLVE_IN_ROOT;
    return (int)syscall(SYS_openat2, root, path, &how, sizeof(how));
}

int csb_openat2_path_beneath(int dirfd, const char *path, int follow_symlinks) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | (follow_symlinks ? 0 : O_NOFOLLOW);
    how.resolve = RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int csb_openat2_path_no_links(int dirfd, const char *path) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_NO_SYMLINKS;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int csb_openat2_path_strictly_beneath(int dirfd, const char *path) {
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    return (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

int csb_chmod_fd(int fd, uint32_t mode) {
    // fchmodat2 (Linux 6.6) takes the O_PATH descriptor itself: no /proc walk.
    int done = (int)syscall(452 /* SYS_fchmodat2, not in Debian 12's headers */, fd, "", (mode_t)mode, AT_EMPTY_PATH);
    if (done == 0 || errno != ENOSYS) return done;
    char path[32];
    csb_proc_fd_path(fd, path);
    return fchmodat(AT_FDCWD, path, (mode_t)mode, 0);
}

int csb_set_no_copy_on_write(int fd) {
    // The kernel's FS_IOC_*FLAGS take an int, whatever their encoded size says.
    int flags = 0;
    if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return -1;
    if (flags & FS_NOCOW_FL) return 0;
    flags |= FS_NOCOW_FL;
    return ioctl(fd, FS_IOC_SETFLAGS, &flags);
}

void *csb_mmap_allocated(void *address, size_t length, int protection, int flags, int fd, off_t offset) {
    if ((protection & PROT_WRITE) && (flags & MAP_SHARED) && fd >= 0) {
        int result;
        do result = fallocate(fd, FALLOC_FL_KEEP_SIZE, offset, (off_t)length); while (result != 0 && errno == EINTR);
        if (result != 0 && errno != EOPNOTSUPP && errno != ENOSYS) return MAP_FAILED;
    }
    return mmap(address, length, protection, flags, fd, offset);
}

/* Copies [offset, end) of src to the same offsets of dst: copy_file_range,
   else read and write. */
static int copy_range(int dst, int src, off_t offset, off_t end) {
    int in_kernel = 1;
    char buffer[65536];
    while (offset < end) {
        size_t want = (size_t)(end - offset);
        if (in_kernel) {
            off_t in = offset, out = offset;
            ssize_t copied = copy_file_range(src, &in, dst, &out, want > (1u << 30) ? (1u << 30) : want, 0);
            if (copied > 0) { offset += copied; continue; }
            if (copied == 0) return 0;  /* src shrank: the caller's status check sees it */
            if (errno == EINTR) continue;
            if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EBADF) return -1;
            in_kernel = 0;  /* another filesystem type, an old kernel: by hand */
        }
        ssize_t count = pread(src, buffer, want > sizeof(buffer) ? sizeof(buffer) : want, offset);
        if (count == 0) return 0;
        if (count < 0) { if (errno == EINTR) continue; return -1; }
        for (ssize_t done = 0; done < count;) {
            ssize_t written = pwrite(dst, buffer + done, (size_t)(count - done), offset + done);
            if (written < 0) { if (errno == EINTR) continue; return -1; }
            done += written;
        }
        offset += count;
    }
    return 0;
}

int csb_copy_file_data(int dst, int src) {
    if (ioctl(dst, FICLONE, src) == 0) return 0;
    struct stat status;
    if (fstat(src, &status) != 0) return -1;
    /* Data only, hole by hole (SEEK_DATA): a sparse file, which costs its
       writer nothing, stays sparse, and never fills the disk when copied.
       EINTR is retried here: a partial copy cannot be retried from outside. */
    off_t size = status.st_size, offset = 0;
    while (offset < size) {
        off_t data = lseek(src, offset, SEEK_DATA);
        if (data < 0) {
            if (errno == ENXIO) break;  /* only a hole is left */
            if (errno != EINVAL) return -1;
            data = offset;  /* no SEEK_DATA here: all of it is data */
        }
        if (data >= size) break;
        off_t hole = lseek(src, data, SEEK_HOLE);
        if (hole < 0 || hole > size) hole = size;
        if (copy_range(dst, src, data, hole) != 0) return -1;
        offset = hole;
    }
    return ftruncate(dst, size);
}

int csb_syncfs(int fd) {
    return syncfs(fd);
}

int csb_chown_fd(int fd, uint32_t uid, uint32_t gid) {
    return fchownat(fd, "", (uid_t)uid, (gid_t)gid, AT_EMPTY_PATH);
}

int csb_utimens_fd(int fd, const int64_t *times_sec_nsec) {
    struct timespec ts[2];
    if (times_sec_nsec != NULL) {
        ts[0].tv_sec = times_sec_nsec[0]; ts[0].tv_nsec = times_sec_nsec[1];
        ts[1].tv_sec = times_sec_nsec[2]; ts[1].tv_nsec = times_sec_nsec[3];
    }
    return utimensat(fd, "", times_sec_nsec ? ts : NULL, AT_EMPTY_PATH);
}

int csb_setxattr_fd(int fd, const char *name, const void *value, size_t size, int flags) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return setxattr(path, name, value, size, flags);
}

int csb_removexattr_fd(int fd, const char *name) {
    char path[32];
    csb_proc_fd_path(fd, path);
    return removexattr(path, name);
}

int csb_memfd_create(const char *name) {
    return memfd_create(name, MFD_CLOEXEC);
}

// MARK: Coordination

const short CSB_F_RDLCK = F_RDLCK;
const short CSB_F_WRLCK = F_WRLCK;
const short CSB_F_UNLCK = F_UNLCK;

int csb_ofd_lock(int fd, short type, int wait) {
    struct flock lock = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0, .l_pid = 0 };
    return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &lock);
}

int csb_rename_noreplace(int olddirfd, const char *oldname, int newdirfd, const char *newname) {
    return renameat2(olddirfd, oldname, newdirfd, newname, RENAME_NOREPLACE);
}

int csb_open_regular(int dirfd, const char *name, int flags, unsigned int mode) {
    // Look before opening: opening a device or a FIFO can have effects of its own.
    struct stat before;
    if (fstatat(dirfd, name, &before, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(before.st_mode)) { errno = ELOOP; return -1; }
        if (!S_ISREG(before.st_mode)) { errno = EINVAL; return -1; }
    } else if (errno != ENOENT || !(flags & O_CREAT)) {
        return -1;
    }
    int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0) return -1;
    struct stat st;
    int status_ok = fstat(fd, &st) == 0;
    if (!status_ok || !S_ISREG(st.st_mode)) {
        int saved = status_ok ? EINVAL : errno;
        close(fd);
        errno = saved;
        return -1;
    }
    int status = fcntl(fd, F_GETFL);
    if (status < 0 || fcntl(fd, F_SETFL, status & ~O_NONBLOCK) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

// A no-op chmod (the mode each already has), with whatever capabilities the
// caller holds: a kernel that lets it through lets the inode's owner through.
int csb_refuses_noop_chmod(int fd) {
    if (fd < 0) return 0;
    struct stat status;
    int refused = fstat(fd, &status) == 0 && fchmod(fd, status.st_mode & 07777) != 0
                  && (errno == EOPNOTSUPP || errno == EPERM);
    close(fd);
    return refused;
}

int csb_internal_inodes_refuse_setattr(void) {
    return csb_refuses_noop_chmod(eventfd(0, EFD_CLOEXEC)) && csb_refuses_noop_chmod(csb_pidfd_open(getpid()));
}

const int CSB_O_PATH = O_PATH;

int csb_filesystem_type(int fd, int64_t *type) {
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return -1;
    *type = (int64_t)info.f_type;
    return 0;
}
