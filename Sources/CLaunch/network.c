// A network namespace made ahead, on a thread of the launcher, while it
// plans the launch (claunch.h), and the sockets of the network by name,
// made by the keeper inside it.
#define _GNU_SOURCE 1
#include "internal.h"

#include <netinet/in.h>
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

// In the keeper, in the sandbox's network namespace (async-signal-safe
// calls only): each planned socket, bound and sent to the launcher.
int csb_egress_send(const struct csb_keeper_plan *keeper, int report_fd) {
    for (int i = 0; i < keeper->egress_listeners_count; i++) {
        const struct csb_egress_listener *planned = &keeper->egress_listeners[i];
        int type = (planned->datagram ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK;
        int fd = socket(AF_INET, type, 0);
        if (fd < 0) return -1;
        int on = 1;
        struct sockaddr_in address;
        memset(&address, 0, sizeof(address));
        address.sin_family = AF_INET;
        address.sin_port = htons(planned->port);
        address.sin_addr.s_addr = planned->address;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0
            || bind(fd, (struct sockaddr *)&address, sizeof(address)) != 0
            || (!planned->datagram && listen(fd, 128) != 0)) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        csb_report_send(report_fd, CSB_KEEPER_EGRESS, 0, i, fd);
        close(fd);
    }
    return 0;
}
