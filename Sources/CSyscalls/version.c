// The commit a release binary was built from. scripts/build-release writes
// it into the linked binary after the marker (same length, NUL-padded), so a
// new commit needs no rebuild. volatile: the compiler must not fold the
// empty initializer into its callers.
#include "csyscalls.h"

#define CSB_COMMIT_MARKER "SANDBOXED_RUN_BUILD_COMMIT:"

__attribute__((used)) static volatile const char csb_commit_slot[sizeof(CSB_COMMIT_MARKER) - 1 + 64] = CSB_COMMIT_MARKER;

const char *csb_build_commit(void) {
    return (const char *)csb_commit_slot + sizeof(CSB_COMMIT_MARKER) - 1;
}
