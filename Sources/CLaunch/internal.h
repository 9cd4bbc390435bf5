// What the keeper and the child share; not part of the module's interface.
#ifndef CLAUNCH_INTERNAL_H
#define CLAUNCH_INTERNAL_H
#include "claunch.h"
#include <sys/types.h>

struct csb_report { int stage; int error; int value; };

/// One report message, with `passed_fd` as SCM_RIGHTS when >= 0.
void csb_report_send(int fd, int stage, int error, int value, int passed_fd);

/// Clones the confined child (CLONE_VM | CLONE_VFORK), which applies `plan`
/// and execs; the caller has blocked every signal.
pid_t csb_clone_child(const struct csb_child_plan *plan, int report_fd);

#endif
