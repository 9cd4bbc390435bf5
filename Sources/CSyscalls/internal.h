// Helpers shared by the wrappers; not part of the module's interface.
#ifndef CSYSCALLS_INTERNAL_H
#define CSYSCALLS_INTERNAL_H
#include <stdio.h>

static inline void csb_proc_fd_path(int fd, char path[32]) {
    snprintf(path, 32, "/proc/self/fd/%d", fd);
}

#endif
