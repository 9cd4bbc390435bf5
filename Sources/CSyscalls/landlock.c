// Landlock: the kernel structs, byte for byte, and the three syscalls.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

#define CSB_LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#define CSB_LANDLOCK_RULE_PATH_BENEATH 1
#define CSB_LANDLOCK_RULE_NET_PORT 2

struct csb_landlock_path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

struct csb_landlock_net_port_attr {
    uint64_t allowed_access;
    uint64_t port;
};

// The copies must match the kernel's layout byte for byte.
_Static_assert(sizeof(struct csb_landlock_ruleset_attr) == 24, "landlock_ruleset_attr (ABI 6)");
_Static_assert(sizeof(struct csb_landlock_path_beneath_attr) == 12, "landlock_path_beneath_attr");
_Static_assert(sizeof(struct csb_landlock_net_port_attr) == 16, "landlock_net_port_attr");
_Static_assert(sizeof(struct csb_seccomp_data) == sizeof(struct seccomp_data), "seccomp_data");
_Static_assert(sizeof(struct csb_seccomp_notif) == sizeof(struct seccomp_notif), "seccomp_notif");
_Static_assert(sizeof(struct csb_seccomp_notif_resp) == sizeof(struct seccomp_notif_resp), "seccomp_notif_resp");
_Static_assert(offsetof(struct csb_seccomp_notif, data) == offsetof(struct seccomp_notif, data), "seccomp_notif.data");

int csb_landlock_abi_version(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, CSB_LANDLOCK_CREATE_RULESET_VERSION);
    return abi < 0 ? 0 : (int)abi;
}

int csb_landlock_create_ruleset(const struct csb_landlock_ruleset_attr *attr) {
    // Older kernels reject a larger struct with non-zero tail fields, so pass
    // only as many fields as are in use.
    size_t size = sizeof(*attr);
    if (attr->scoped == 0) {
        size = offsetof(struct csb_landlock_ruleset_attr, scoped);
        if (attr->handled_access_net == 0) size = offsetof(struct csb_landlock_ruleset_attr, handled_access_net);
    }
    return (int)syscall(SYS_landlock_create_ruleset, attr, size, 0);
}

int csb_landlock_add_path_rule(int ruleset_fd, int parent_fd, uint64_t allowed_access) {
    struct csb_landlock_path_beneath_attr attr = { .allowed_access = allowed_access, .parent_fd = parent_fd };
    return (int)syscall(SYS_landlock_add_rule, ruleset_fd, CSB_LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
}

int csb_landlock_add_port_rule(int ruleset_fd, uint64_t port, uint64_t allowed_access) {
    struct csb_landlock_net_port_attr attr = { .allowed_access = allowed_access, .port = port };
    return (int)syscall(SYS_landlock_add_rule, ruleset_fd, CSB_LANDLOCK_RULE_NET_PORT, &attr, 0);
}
