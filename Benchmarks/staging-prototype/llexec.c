// llexec: run a command under a Landlock domain that allows reading everywhere (/ -> read
// rights) and writing only beneath the given folders.  llexec DIR... -- CMD ARGS
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/landlock.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#define RIGHTS_V1 ((1ULL << 13) - 1)
#define REFER (1ULL << 13)
#define TRUNCATE (1ULL << 14)
#define READ (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
int main(int argc, char **argv) {
    struct landlock_ruleset_attr attr = { .handled_access_fs = RIGHTS_V1 | REFER | TRUNCATE };
    int rs = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rs < 0) { perror("ruleset"); return 1; }
    struct landlock_path_beneath_attr pb = { .allowed_access = READ, .parent_fd = open("/", O_PATH | O_CLOEXEC) };
    syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--"); i++) {
        pb.allowed_access = RIGHTS_V1 | REFER | TRUNCATE; pb.parent_fd = open(argv[i], O_PATH | O_CLOEXEC);
        if (pb.parent_fd < 0 || syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0)) { perror(argv[i]); return 1; }
    }
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (syscall(SYS_landlock_restrict_self, rs, 0)) { perror("restrict"); return 1; }
    execvp(argv[i + 1], argv + i + 1); perror("exec"); return 127;
}
