// A person's name for each failure stage, beside the stages themselves: a
// stage added to claunch.h without a name here gets NULL, which the tests'
// check of every stage catches.
#include "claunch.h"

const char *csb_stage_name(int stage) {
    switch (stage) {
    case CSB_STAGE_SIGNALS: return "resetting signals";
    case CSB_STAGE_PARENT_DEATH: return "PR_SET_PDEATHSIG";
    case CSB_STAGE_SESSION: return "setsid";
    case CSB_STAGE_STDIO: return "binding stdin/stdout/stderr";
    case CSB_STAGE_FDS: return "closing descriptors";
    case CSB_STAGE_CHDIR: return "changing to the working directory";
    case CSB_STAGE_NO_NEW_PRIVS: return "PR_SET_NO_NEW_PRIVS";
    case CSB_STAGE_CAPABILITIES: return "dropping capabilities";
    case CSB_STAGE_LANDLOCK: return "landlock_restrict_self";
    case CSB_STAGE_SECCOMP: return "loading the seccomp filter";
    case CSB_STAGE_LISTENER: return "handing over the seccomp listener";
    case CSB_STAGE_EXEC: return "execve";
    case CSB_STAGE_TERMINAL: return "making the pty the controlling terminal (TIOCSCTTY)";
    case CSB_STAGE_REOPEN: return "opening stdin/stdout/stderr's device again in the sandbox's namespace";
    case CSB_STAGE_LIMITS: return "setting the policy's resource limits (org.sandboxed-run.limits)";
    case CSB_KEEPER_RUNNING: return "starting the command";
    case CSB_KEEPER_EXITED: return "the command's end";
    case CSB_KEEPER_SESSION: return "setsid in the keeper";
    case CSB_KEEPER_SUBREAPER: return "PR_SET_CHILD_SUBREAPER in the keeper";
    case CSB_KEEPER_LANDLOCK: return "the keeper's Landlock signal scope";
    case CSB_KEEPER_SIGNALS: return "the keeper's signals";
    case CSB_KEEPER_FORK: return "forking the command from the keeper";
    case CSB_KEEPER_NAMESPACES: return "the keeper's namespaces";
    case CSB_KEEPER_ID_MAP: return "mapping the keeper's uid and gid in its user namespace";
    case CSB_KEEPER_MOUNT: return "making the keeper's mounts private";
    case CSB_KEEPER_READ_ONLY_MOUNTS: return "making the keeper's mounts read-only";
    case CSB_KEEPER_VIEW: return "building the private view";
    case CSB_KEEPER_PTY_MASTER: return "the command's pty (its master)";
    case CSB_KEEPER_PTY_TERMINAL: return "the command's pty (its terminal side)";
    case CSB_KEEPER_GRANT_AREA: return "the live grants' area";
    case CSB_KEEPER_VIEW_GRANT: return "a grant's mount in the view";
    }
    return 0;
}
