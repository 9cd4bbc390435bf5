// stageclone: the clone design's launch step. stageclone SRC DST MANIFEST
// Walks SRC beneath itself (openat, O_NOFOLLOW; folders and regular files only, anything else is
// recorded and not copied), makes DST/... with the same names and modes (setuid/setgid stripped),
// copies each regular file with FICLONE (a reflink, where SRC and DST share a btrfs/XFS) or else
// copy_file_range, and writes one manifest line per item:
//   kind \t host-dev \t host-ino \t size \t mtime-ns \t ctime-ns \t clone-ino:generation \t clone-ctime-ns \t relpath(escaped)
// The host identity (dev, ino, size, mtime, ctime) decides "changed outside since staged" at accept;
// the clone's inode number follows a file the command renames, so renames are found by identity.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
static FILE *man; static long nfiles, nclone, ncopy, nskip;
static long long ns(struct timespec t) { return t.tv_sec * 1000000000LL + t.tv_nsec; }
static void esc(const char *s) { for (; *s; s++) { unsigned char c = *s; if (c < 0x20 || c >= 0x7f || c == '\\') fprintf(man, "\\x%02x", c); else fputc(c, man); } }
static unsigned gen(int fd) { unsigned g = 0; ioctl(fd, FS_IOC_GETVERSION, &g); return g; }  // i_generation: st_ino alone is reused after a delete
static unsigned cgen;
static void rec(char k, struct stat *h, struct stat *c, const char *rel) {
    fprintf(man, "%c\t%lu\t%lu\t%lld\t%lld\t%lld\t%lu:%u\t%lld\t", k, (unsigned long)h->st_dev, (unsigned long)h->st_ino, (long long)h->st_size,
            ns(h->st_mtim), ns(h->st_ctim), c ? (unsigned long)c->st_ino : 0UL, cgen, c ? ns(c->st_ctim) : 0LL);
    esc(rel); fputc('\n', man);
}
static void walk(int sfd, int dfd, const char *rel) {
    DIR *d = fdopendir(dup(sfd)); if (!d) { perror("fdopendir"); exit(1); }
    struct dirent *e; char sub[8192];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        struct stat h, c;
        if (fstatat(sfd, e->d_name, &h, AT_SYMLINK_NOFOLLOW)) { perror(sub); exit(1); }
        if (S_ISDIR(h.st_mode)) {
            if (mkdirat(dfd, e->d_name, 0700)) { perror(sub); exit(1); }
            int s2 = openat(sfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            int d2 = openat(dfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (s2 < 0 || d2 < 0) { perror(sub); exit(1); }
            walk(s2, d2, sub);
            fchmod(d2, h.st_mode & 01777); fstat(d2, &c); cgen = gen(d2); rec('d', &h, &c, sub); close(s2); close(d2);
        } else if (S_ISREG(h.st_mode)) {
            int s = openat(sfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
            if (s < 0 && errno == EPERM) s = openat(sfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            int t = openat(dfd, e->d_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, h.st_mode & 0777);
            if (s < 0 || t < 0) { perror(sub); exit(1); }
            struct stat hs; fstat(s, &hs);   // identity of what is copied, not of the name looked up
            if (ioctl(t, FICLONE, s) == 0) nclone++;
            else { for (off_t left = hs.st_size; left > 0; ) { ssize_t n = copy_file_range(s, NULL, t, NULL, left, 0); if (n <= 0) { perror("copy"); exit(1); } left -= n; } ncopy++; }
            struct timespec ts[2] = { hs.st_atim, hs.st_mtim }; futimens(t, ts);
            fstat(t, &c); cgen = gen(t); rec('f', &hs, &c, sub); close(s); close(t); nfiles++;
        } else { cgen = 0; rec('o', &h, NULL, sub); nskip++; }   // links, FIFOs, sockets, devices: not staged (the policy makes none)
    }
    closedir(d);
}
int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: stageclone SRC DST MANIFEST\n"); return 2; }
    int s = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC); if (mkdir(argv[2], 0700) && errno != EEXIST) { perror(argv[2]); return 1; }
    int d = open(argv[2], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); man = fopen(argv[3], "w");
    if (s < 0 || d < 0 || !man) { perror("open"); return 1; }
    walk(s, d, ""); fclose(man);
    fprintf(stderr, "files %ld (reflinked %ld, copied %ld), not staged %ld\n", nfiles, nclone, ncopy, nskip);
    return 0;
}
