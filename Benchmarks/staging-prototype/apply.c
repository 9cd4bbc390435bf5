// apply: the accept step for staged regular files, as a coordinated writer.
//   apply perfile|batched STAGED TARGET
// For every regular file STAGED/DIR/NAME (one level of folders, as the benchmark's vault):
// open TARGET/DIR beneath TARGET (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), take an OFD
// write lock on TARGET/DIR/NAME, check it still is the inode recorded in the manifest
// (st_ino, size, mtime, ctime; here recorded just before: no conflicts), write the staged
// bytes to a temporary file beside it (mode without setuid/setgid), make it durable, rename
// it over NAME while the name still leads to the locked inode, make the folder durable.
// perfile: fsync the temporary and the folder for each file.
// batched: write every temporary first, one syncfs, then lock+check+rename each, one syncfs.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define DIE(m) do { perror(m); exit(1); } while (0)
typedef struct { char dir[256], name[256]; int dirfd, tmpfd; struct stat base; char tmp[300]; } Item;
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int beneath(int root, const char *p, int flags) {
    struct open_how how = { .flags = flags | O_CLOEXEC, .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV };
    return syscall(SYS_openat2, root, p, &how, sizeof how);
}
static int same(struct stat *a, struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
        a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
        a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}
static void write_tmp(int staged, Item *it, int sync_each) {
    char sp[600]; snprintf(sp, sizeof sp, "%s/%s", it->dir, it->name);
    int src = beneath(staged, sp, O_RDONLY | O_NOFOLLOW); if (src < 0) DIE(sp);
    struct stat s; fstat(src, &s); if (!S_ISREG(s.st_mode)) { fprintf(stderr, "not a regular file\n"); exit(1); }
    snprintf(it->tmp, sizeof it->tmp, ".sr-accept-%d-%s", getpid(), it->name);
    it->tmpfd = openat(it->dirfd, it->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, s.st_mode & 0777);  // never setuid/setgid
    if (it->tmpfd < 0) DIE("tmp");
    for (off_t left = s.st_size; left > 0; ) { ssize_t n = copy_file_range(src, NULL, it->tmpfd, NULL, left, 0); if (n <= 0) DIE("copy"); left -= n; }
    if (sync_each && fsync(it->tmpfd)) DIE("fsync");
    close(src);
}
static void land(Item *it, int sync_each) {
    int fd = openat(it->dirfd, it->name, O_RDWR | O_NOFOLLOW | O_CLOEXEC); if (fd < 0) DIE("target");
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    if (fcntl(fd, F_OFD_SETLKW, &l)) DIE("lock");
    struct stat now, byname; fstat(fd, &now);
    if (fstatat(it->dirfd, it->name, &byname, AT_SYMLINK_NOFOLLOW) || byname.st_ino != now.st_ino || !same(&now, &it->base)) {
        fprintf(stderr, "conflict: %s/%s (a real accept keeps the staged bytes as a conflict version)\n", it->dir, it->name); exit(3);
    }
    if (renameat(it->dirfd, it->tmp, it->dirfd, it->name)) DIE("rename");
    if (sync_each && fsync(it->dirfd)) DIE("fsync dir");
    close(fd); close(it->tmpfd);
}
int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: apply perfile|batched STAGED TARGET\n"); return 2; }
    int perfile = !strcmp(argv[1], "perfile");
    int staged = open(argv[2], O_PATH | O_DIRECTORY | O_CLOEXEC), target = open(argv[3], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    Item *items = calloc(100000, sizeof *items); int n = 0;
    DIR *top = fdopendir(openat(staged, ".", O_RDONLY | O_DIRECTORY)); struct dirent *d;
    while ((d = readdir(top))) {
        if (d->d_type != DT_DIR || d->d_name[0] == '.') continue;
        int tdir = beneath(target, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW); if (tdir < 0) DIE(d->d_name);
        DIR *sub = fdopendir(openat(staged, d->d_name, O_RDONLY | O_DIRECTORY)); struct dirent *f;
        while ((f = readdir(sub))) if (f->d_type == DT_REG) {
            Item *it = &items[n++]; snprintf(it->dir, 256, "%s", d->d_name); snprintf(it->name, 256, "%s", f->d_name); it->dirfd = tdir;
            if (fstatat(tdir, f->d_name, &it->base, AT_SYMLINK_NOFOLLOW)) DIE("base");  // stands in for the manifest
        }
        closedir(sub);
    }
    double t0 = now_ms();
    if (perfile) { for (int i = 0; i < n; i++) { write_tmp(staged, &items[i], 1); land(&items[i], 1); } }
    else {
        for (int i = 0; i < n; i++) write_tmp(staged, &items[i], 0);
        if (syncfs(target)) DIE("syncfs");
        for (int i = 0; i < n; i++) land(&items[i], 0);
        if (syncfs(target)) DIE("syncfs");
    }
    printf("%s: %d files in %.1f ms\n", argv[1], n, now_ms() - t0);
    return 0;
}
