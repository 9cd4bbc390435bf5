// A network namespace made ahead, on a thread of the launcher, while it
// plans the launch (claunch.h). Runs in the launcher, never after a fork.
#define _GNU_SOURCE 1
#include "internal.h"

#include <stdlib.h>

struct csb_network_ahead { pthread_t thread; int fd; int error; };

// On its own thread: unshare changes only this thread's namespace, which
// the descriptor keeps once the thread has ended.
static void *csb_network_ahead_run(void *argument) {
    struct csb_network_ahead *ahead = argument;
    if (unshare(CLONE_NEWNET) != 0 || csb_loopback_up() != 0) {
        ahead->error = errno;
        return NULL;
    }
    ahead->fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (ahead->fd < 0) ahead->error = errno;
    return NULL;
}

struct csb_network_ahead *csb_network_ahead_start(void) {
    if (geteuid() != 0) return NULL;  // a user namespace's keeper makes its own
    struct csb_network_ahead *ahead = calloc(1, sizeof(*ahead));
    if (ahead == NULL) return NULL;
    ahead->fd = -1;
    // No signal of the launcher's is handled on this thread.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int started = pthread_create(&ahead->thread, NULL, csb_network_ahead_run, ahead);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (started != 0) {
        free(ahead);
        return NULL;
    }
    return ahead;
}

int csb_network_ahead_finish(struct csb_network_ahead *ahead) {
    pthread_join(ahead->thread, NULL);
    int fd = ahead->fd, error = ahead->error;
    free(ahead);
    if (fd < 0) errno = error;
    return fd;
}
