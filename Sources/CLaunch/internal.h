// What the keeper and the child share; not part of the module's interface.
#ifndef CLAUNCH_INTERNAL_H
#define CLAUNCH_INTERNAL_H
#include "claunch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

struct csb_report { int stage; int error; int value; };

/// One report message, with `passed_fd` as SCM_RIGHTS when >= 0.
void csb_report_send(int fd, int stage, int error, int value, int passed_fd);
/// One message of `length` bytes, with `passed_fd` as SCM_RIGHTS when >= 0; EINTR retried.
ssize_t csb_send_with_fd(int fd, const void *bytes, size_t length, int passed_fd);

/// Builds the private view in the keeper's new namespaces (view.c), and
/// brings up the loopback of a private network unless `loopback_up`: 0, or
/// -1 with errno and `failure` (a csb_view_failure, or the failing step).
/// The root is final afterwards, with the sandbox's /proc when
/// `proc_mounted` says so; /dev/shm is still to mount.
int csb_view_build(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper, int loopback_up, int report_fd, int *failure, int *proc_mounted);

/// Brings up the loopback interface of the caller's network namespace (view.c).
int csb_loopback_up(void);
int csb_egress_send(const struct csb_keeper_plan *keeper, int report_fd);

/// Live grants (grantarea.c). While the view is built (`root`: its tmpfs,
/// not yet entered): mounts the area and adds its rules.
int csb_grant_area_build(const struct csb_child_plan *plan, const struct csb_keeper_plan *keeper, int root);
/// Hands the area's writable mount and its O_PATH in the view to the
/// launcher (CSB_KEEPER_GRANT_AREA, value 0 and 1), and closes both.
int csb_grant_area_send(int report_fd);

/// Opens the command's pty in the view's own devpts, with the plan's modes and size.
// Async-signal-safe helpers of the keeper (keeper.c), shared with doctor's probe.
// Decimal digits of `value` at `out` (at most 20); returns how many.
size_t csb_format_u64(char *out, uint64_t value);
// Writes `text` whole to `path` (a /proc file); 0, or -1 with errno.
int csb_write_proc_file(const char *path, const char *text, size_t length);
// Writes "ID ID 1\n" to a uid_map or gid_map: the id maps to itself only.
int csb_map_own_id(const char *path, uint64_t id);

int csb_view_pty(const struct csb_keeper_plan *keeper, int *master, int *terminal);

/// Clones the confined child (CLONE_VM | CLONE_VFORK), which applies `plan`
/// and execs; the caller has blocked every signal.
pid_t csb_clone_child(const struct csb_child_plan *plan, int report_fd);

#endif
