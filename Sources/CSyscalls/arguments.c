// argv as the loader passed it, and the shared objects it mapped.
#define _GNU_SOURCE 1
#include "csyscalls.h"
#include "internal.h"

// MARK: Arguments

static int csb_argc;
static char *const *csb_argv;

// glibc calls ELF constructors with (argc, argv, envp).
__attribute__((constructor)) static void csb_save_arguments(int argc, char **argv, char **envp) {
    (void)envp;
    csb_argc = argc;
    csb_argv = argv;
}

int csb_saved_argc(void) { return csb_argc; }
char *const *csb_saved_argv(void) { return csb_argv; }

struct csb_loaded_visit { void (*visit)(const char *, void *); void *context; };

static int csb_loaded_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct csb_loaded_visit *visit = data;
    if (info->dlpi_name != NULL && info->dlpi_name[0] != '\0') visit->visit(info->dlpi_name, visit->context);
    return 0;
}

void csb_loaded_objects(void (*visit)(const char *path, void *context), void *context) {
    struct csb_loaded_visit state = { visit, context };
    dl_iterate_phdr(csb_loaded_object, &state);
}
