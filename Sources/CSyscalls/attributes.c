// Extended attributes on descriptors opened for reading or writing (an
// O_PATH descriptor gives EBADF: csb_getxattr_fd and friends reach those
// through /proc). No retry here: callers retry EINTR in one place.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

ssize_t csb_fgetxattr(int fd, const char *name, void *value, size_t size) {
    return fgetxattr(fd, name, value, size);
}

int csb_fsetxattr(int fd, const char *name, const void *value, size_t size) {
    return fsetxattr(fd, name, value, size, 0);
}

int csb_fremovexattr(int fd, const char *name) {
    return fremovexattr(fd, name);
}
