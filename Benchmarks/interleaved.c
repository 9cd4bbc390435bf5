// Wall-clock time of several commands, measured in turns: each round runs
// every command once, so that whatever drifts on the machine (other load,
// the page cache that the VM's reclaim trims between launches, CPU
// frequency) falls on all commands alike and their ratios stay honest. The
// order is shuffled anew each round, so that no command always follows the
// same one (whose page cache it may share). hyperfine runs one command's launches in a
// row instead, and on the 2-core VM the same binary measured first or
// second moved by 3 to 12%.
//   interleaved ROUNDS WARMUP 'command args...' ...
// A command is split at spaces; a word in single quotes keeps its spaces
// ('sh -c 'find . | sha256sum'': three words), no other quoting. Leading
// NAME=value words are added to that command's environment (as env(1) would,
// without a process of its own in the measurement). stdio go to /dev/null. Prints,
// per command: median, 25th and 75th percentile in ms, the median CPU time in
// ms (user and system, of the command and every process it waited for: less
// moved by other load than the wall clock) and the peak resident memory in
// KiB (the largest of those processes), then the command.
// A command that fails once fails the whole run (exit 1).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum { MAX_COMMANDS = 24, MAX_ARGS = 512 };  // bubblewrap building a policy's view takes a few hundred words

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// xorshift64: a fixed seed, so that two runs shuffle alike.
static uint64_t next_random(void) {
    static uint64_t state = 0x9E3779B97F4A7C15u;
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static double run_once(char *const argv[], char *const envp[], posix_spawn_file_actions_t *actions, double *cpu, long *peak) {
    pid_t pid;
    double start = now_ms();
    int error = posix_spawn(&pid, argv[0], actions, NULL, argv, envp);
    if (error != 0) {
        fprintf(stderr, "interleaved: cannot start %s: %s\n", argv[0], strerror(error));
        exit(1);
    }
    int status;
    struct rusage usage;
    while (wait4(pid, &status, 0, &usage) < 0) {
        if (errno != EINTR) { perror("interleaved: waitpid"); exit(1); }
    }
    double elapsed = now_ms() - start;
    *cpu = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
    // posix_spawn's child shares this process's memory until its exec: this
    // program's own peak (about 1 MB) is the floor of every figure.
    if (usage.ru_maxrss > *peak) *peak = usage.ru_maxrss;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "interleaved: %s failed (status %d)\n", argv[0], status);
        exit(1);
    }
    return elapsed;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc - 3 > MAX_COMMANDS) {
        fprintf(stderr, "usage: interleaved ROUNDS WARMUP 'command args...' ... (at most %d commands)\n", MAX_COMMANDS);
        return 2;
    }
    int rounds = atoi(argv[1]), warmup = atoi(argv[2]), count = argc - 3;
    if (rounds < 1 || warmup < 0) { fprintf(stderr, "interleaved: ROUNDS >= 1, WARMUP >= 0\n"); return 2; }
    static char *args[MAX_COMMANDS][MAX_ARGS + 1];
    char **argvs[MAX_COMMANDS], **envs[MAX_COMMANDS];
    for (int c = 0; c < count; c++) {
        int n = 0;
        for (char *p = argv[3 + c]; *p != '\0';) {
            if (*p == ' ') { p++; continue; }
            if (n == MAX_ARGS) { fprintf(stderr, "interleaved: too many arguments\n"); return 2; }
            char quote = *p == '\'' ? *p++ : ' ';
            args[c][n++] = p;
            while (*p != '\0' && *p != quote) p++;
            if (quote != ' ' && *p != quote) { fprintf(stderr, "interleaved: unmatched quote in command %d\n", c + 1); return 2; }
            if (*p != '\0') *p++ = '\0';
        }
        args[c][n] = NULL;
        // NAME=value words first: that command's environment, the inherited one after them.
        int assignments = 0;
        while (assignments < n && strchr(args[c][assignments], '=') != NULL && args[c][assignments][0] != '/') assignments++;
        if (assignments == n) { fprintf(stderr, "interleaved: empty command\n"); return 2; }
        size_t inherited = 0;
        while (environ[inherited] != NULL) inherited++;
        envs[c] = calloc((size_t)assignments + inherited + 1, sizeof(char *));
        if (envs[c] == NULL) { perror("interleaved"); return 1; }
        for (int i = 0; i < assignments; i++) envs[c][i] = args[c][i];
        memcpy(envs[c] + assignments, environ, inherited * sizeof(char *));
        argvs[c] = args[c] + assignments;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    for (int fd = 0; fd <= 2; fd++) posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);

    double *times = calloc((size_t)count * (size_t)rounds, sizeof(double));
    double *cpus = calloc((size_t)count * (size_t)rounds, sizeof(double));
    long peaks[MAX_COMMANDS] = {0};
    if (times == NULL || cpus == NULL) { perror("interleaved"); return 1; }
    int order[MAX_COMMANDS];
    for (int c = 0; c < count; c++) order[c] = c;
    for (int round = -warmup; round < rounds; round++) {
        for (int i = count - 1; i > 0; i--) {  // Fisher-Yates
            int j = (int)(next_random() % (uint64_t)(i + 1));
            int swap = order[i];
            order[i] = order[j];
            order[j] = swap;
        }
        for (int i = 0; i < count; i++) {
            int c = order[i];
            double cpu;
            double elapsed = run_once(argvs[c], envs[c], &actions, &cpu, &peaks[c]);
            if (round >= 0) {
                times[(size_t)c * rounds + round] = elapsed;
                cpus[(size_t)c * rounds + round] = cpu;
            }
        }
    }
    for (int c = 0; c < count; c++) {
        double *mine = times + (size_t)c * rounds;
        qsort(mine, (size_t)rounds, sizeof(double), by_value);
        double median = rounds % 2 ? mine[rounds / 2] : (mine[rounds / 2 - 1] + mine[rounds / 2]) / 2;
        double *used = cpus + (size_t)c * rounds;
        qsort(used, (size_t)rounds, sizeof(double), by_value);
        double cpu = rounds % 2 ? used[rounds / 2] : (used[rounds / 2 - 1] + used[rounds / 2]) / 2;
        printf("%.3f %.3f %.3f %.3f %ld", median, mine[rounds / 4], mine[(3 * rounds) / 4], cpu, peaks[c]);
        for (char **word = args[c]; *word != NULL; word++) printf(" %s", *word);
        printf("\n");
    }
    return 0;
}
