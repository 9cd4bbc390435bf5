// open + read + close of one file, in turns between two paths (a live grant
// and a launch-time grant of the same folder, say): each round runs BLOCK
// operations on one path, then BLOCK on the other, the order swapped every
// round, so drift falls on both alike. Prints per path the median ns per
// operation over the rounds.
//   live-grants-open ROUNDS BLOCK PATH_A PATH_B
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double block(const char *path, int count) {
    char buffer[4096];
    double start = now_ns();
    for (int i = 0; i < count; i++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, buffer, sizeof(buffer)) < 0) { perror(path); exit(1); }
        close(fd);
    }
    return (now_ns() - start) / count;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s ROUNDS BLOCK PATH_A PATH_B\n", argv[0]); return 2; }
    int rounds = atoi(argv[1]), count = atoi(argv[2]);
    double *a = calloc(rounds, sizeof(double)), *b = calloc(rounds, sizeof(double));
    block(argv[3], count);
    block(argv[4], count);
    for (int r = 0; r < rounds; r++) {
        if (r % 2) { a[r] = block(argv[3], count); b[r] = block(argv[4], count); }
        else { b[r] = block(argv[4], count); a[r] = block(argv[3], count); }
    }
    qsort(a, rounds, sizeof(double), by_value);
    qsort(b, rounds, sizeof(double), by_value);
    printf("%.1f %.1f\n", a[rounds / 2], b[rounds / 2]);
    return 0;
}
