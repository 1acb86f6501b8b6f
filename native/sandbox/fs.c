#include "fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "run.h"

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
struct mount_attr {
    uint64_t attr_set, attr_clr, propagation, userns_fd;
};
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif

static int join(char *out, size_t cap, const char *root, const char *path, struct error *err)
{
    if ((size_t)snprintf(out, cap, "%s%s", root, path) >= cap)
        return fail(err, "path too long: %s%s", root, path);
    return 0;
}

/* mkdir -p for everything but the last component of path. */
static int make_parents(const char *path, struct error *err)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return fail_errno(err, "mkdir %s", buf);
        *p = '/';
    }
    return 0;
}

static int make_readonly(const char *target, struct error *err)
{
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
    if (syscall(__NR_mount_setattr, AT_FDCWD, target, AT_RECURSIVE, &attr, sizeof attr) == 0)
        return 0;
    if (errno != ENOSYS)
        return fail_errno(err, "read-only %s", target);
    /* Kernels before 5.12: the top mount only; flags locked by the user namespace must be kept. */
    struct statvfs sv;
    unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV;
    if (statvfs(target, &sv) == 0 && (sv.f_flag & ST_NOEXEC))
        flags |= MS_NOEXEC;
    return mount(NULL, target, NULL, flags, NULL) ? fail_errno(err, "read-only %s", target) : 0;
}

/*
 * Walks path on the host, mirroring into root every symbolic link met on the way (the same link, so
 * that it resolves inside as it does outside: /lib -> usr/lib, libz.so.1 -> libz.so.1.2.13), and writes
 * the path with all links followed into resolved.
 */
static int mirror_links(const char *root, const char *path, char *resolved, size_t cap, struct error *err)
{
    char todo[PATH_MAX], walked[PATH_MAX] = "";
    snprintf(todo, sizeof todo, "%s", path);
    size_t at = 0;
    for (int links = 0; todo[at];) {
        while (todo[at] == '/')
            at++;
        size_t len = strcspn(todo + at, "/");
        if (!len)
            break;
        char name[PATH_MAX], next[PATH_MAX];
        snprintf(name, sizeof name, "%.*s", (int)len, todo + at);
        at += len;
        if (!strcmp(name, "."))
            continue;
        if (!strcmp(name, "..")) { /* what was walked holds no links: lexical is right */
            char *slash = strrchr(walked, '/');
            if (slash)
                *slash = '\0';
            continue;
        }
        if ((size_t)snprintf(next, sizeof next, "%s/%s", walked, name) >= sizeof next)
            return fail(err, "path too long: %s", path);
        struct stat st;
        if (lstat(next, &st))
            return fail_errno(err, "read-only path %s", path);
        if (!S_ISLNK(st.st_mode)) {
            snprintf(walked, sizeof walked, "%s", next);
            continue;
        }
        char link[PATH_MAX], inside[PATH_MAX], rest[PATH_MAX];
        ssize_t n = readlink(next, link, sizeof link - 1);
        if (n < 0 || ++links > 40)
            return n < 0 ? fail_errno(err, "readlink %s", next) : fail(err, "too many links in %s", path);
        link[n] = '\0';
        if (join(inside, sizeof inside, root, next, err) || make_parents(inside, err))
            return -1;
        if (symlink(link, inside) && errno != EEXIST)
            return fail_errno(err, "symlink %s", inside);
        snprintf(rest, sizeof rest, "%s", todo + at);
        if ((size_t)snprintf(todo, sizeof todo, "%s/%s%s", link[0] == '/' ? "" : walked, link, rest) >= sizeof todo)
            return fail(err, "path too long: %s", path);
        walked[0] = '\0'; /* the new path is absolute: walk it again from the top */
        at = 0;
    }
    snprintf(resolved, cap, "%s", walked[0] ? walked : "/");
    return 0;
}

/* Binds path read-only at the same place in root (its links mirrored, see mirror_links). Returns 1
 * when the path does not exist and optional is set. */
static int expose_readonly(const char *root, const char *path, bool optional, struct error *err)
{
    char real[PATH_MAX], target[PATH_MAX];
    struct stat st;
    if (stat(path, &st)) {
        if (optional && errno == ENOENT)
            return 1;
        return fail_errno(err, "read-only path %s", path);
    }
    if (mirror_links(root, path, real, sizeof real, err) || join(target, sizeof target, root, real, err) ||
        make_parents(target, err))
        return -1;
    if (S_ISDIR(st.st_mode) ? mkdir(target, 0755) && errno != EEXIST
                            : mknod(target, S_IFREG | 0644, 0) && errno != EEXIST)
        return fail_errno(err, "mount point %s", target);
    if (mount(real, target, NULL, MS_BIND | MS_REC, NULL))
        return fail_errno(err, "bind %s", real);
    return make_readonly(target, err);
}

static int make_dev(const char *root, struct error *err)
{
    static const char *const devices[] = {"null", "zero", "full", "random", "urandom"};
    static const char *const links[][2] = {
        {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
        {"/proc/self/fd/2", "stderr"},
    };
    char dev[PATH_MAX], path[PATH_MAX + 16];
    if (join(dev, sizeof dev, root, "/dev", err))
        return -1;
    if (mkdir(dev, 0755) || mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k"))
        return fail_errno(err, "mount %s", dev);
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
        char host[32];
        snprintf(host, sizeof host, "/dev/%s", devices[i]);
        snprintf(path, sizeof path, "%s/%s", dev, devices[i]);
        if (mknod(path, S_IFREG | 0666, 0) || mount(host, path, NULL, MS_BIND, NULL))
            return fail_errno(err, "bind %s", host);
    }
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dev, links[i][1]);
        if (symlink(links[i][0], path))
            return fail_errno(err, "symlink %s", path);
    }
    /* Only the tmpfs itself: the device binds must stay usable (a recursive nodev would break them). */
    if (mount(NULL, dev, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL))
        return fail_errno(err, "read-only %s", dev);
    return 0;
}

static int make_tmp(const char *root, const struct options *o, uid_t uid, gid_t gid, struct error *err)
{
    char tmp[PATH_MAX], data[128];
    if (join(tmp, sizeof tmp, root, SANDBOX_TMP, err))
        return -1;
    snprintf(data, sizeof data, "mode=0700,uid=%u,gid=%u,size=%llu,nr_inodes=%llu", (unsigned)uid, (unsigned)gid,
             o->tmp_bytes, tmp_entries_limit(o));
    if (mkdir(tmp, 0755) || mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, data))
        return fail_errno(err, "mount %s", tmp);
    for (size_t i = 0; i < o->file_count; i++)
        if (copy_into(o->files[i].source, tmp, o->files[i].name, true, uid, gid, err))
            return -1;
    return 0;
}

static bool mount_proc(const char *root)
{
    char proc[PATH_MAX];
    if (join(proc, sizeof proc, root, "/proc", NULL) || mkdir(proc, 0555))
        return false;
    unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    /* hidepid=2: processes of other users (the sandbox's init) are invisible. */
    return mount("proc", proc, "proc", flags, "hidepid=2") == 0 || mount("proc", proc, "proc", flags, NULL) == 0;
}

static int enter_root(const char *root, struct error *err)
{
    if (chdir(root) || syscall(SYS_pivot_root, ".", "."))
        return fail_errno(err, "pivot_root %s", root);
    if (umount2(".", MNT_DETACH) || chdir("/"))
        return fail_errno(err, "detaching the old root");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL))
        return fail_errno(err, "read-only root");
    return 0;
}

/* Mounts an empty tmpfs over a hidden directory of the view; returns 1 when mounted, 0 when the path
 * is not a directory of the view (nothing to hide), -1 on error. */
static int hide(const char *root, const char *path, struct error *err)
{
    char target[PATH_MAX];
    struct stat st;
    if (join(target, sizeof target, root, path, err))
        return -1;
    if (lstat(target, &st) || !S_ISDIR(st.st_mode))
        return 0;
    if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m,nr_inodes=4096"))
        return fail_errno(err, "hide %s", path);
    return 1;
}

static int seal(const char *root, const char *path, struct error *err)
{
    char target[PATH_MAX];
    if (join(target, sizeof target, root, path, err))
        return -1;
    if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
        return fail_errno(err, "read-only %s", target);
    return 0;
}

/* The default and requested paths, then the hidden directories masked over them, then the requested
 * paths beneath hidden ones (their mount points are made inside the still writable masks). */
static int expose_view(const char *root, const struct options *o, struct error *err)
{
    for (unsigned long i = 0; !o->no_default_paths && i < default_ro_count; i++)
        if (expose_readonly(root, default_ro_paths[i], true, err) < 0)
            return -1;
    for (size_t i = 0; i < o->ro_count; i++)
        if (!path_hidden(o, o->ro_paths[i]) && expose_readonly(root, o->ro_paths[i], false, err) < 0)
            return -1;
    char *masked = calloc(o->hidden_count + 1, 1);
    int rc = masked ? 0 : fail(err, "out of memory");
    for (size_t i = 0; !rc && i < o->hidden_count; i++) {
        int mounted = hide(root, o->hidden_paths[i], err);
        rc = mounted < 0 ? -1 : 0;
        masked[i] = mounted > 0;
    }
    for (size_t i = 0; !rc && i < o->ro_count; i++)
        if (path_hidden(o, o->ro_paths[i]) && expose_readonly(root, o->ro_paths[i], false, err) < 0)
            rc = -1;
    for (size_t i = 0; !rc && i < o->hidden_count; i++)
        if (masked[i])
            rc = seal(root, o->hidden_paths[i], err);
    free(masked);
    return rc;
}

int build_private_root(const char *root, const struct options *o, uid_t uid, gid_t gid, bool *proc_mounted,
                       struct error *err)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
        return fail_errno(err, "making mounts private");
    if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m"))
        return fail_errno(err, "mount tmpfs at %s", root);
    /* /tmp first: read-only paths beneath it then appear inside the private /tmp. */
    if (make_tmp(root, o, uid, gid, err) || make_dev(root, err) || expose_view(root, o, err))
        return -1;
    *proc_mounted = mount_proc(root);
    return enter_root(root, err);
}

int copy_into(const char *source, const char *dir, const char *name, bool chown_to, uid_t uid, gid_t gid,
              struct error *err)
{
    char target[PATH_MAX];
    if ((size_t)snprintf(target, sizeof target, "%s/%s", dir, name) >= sizeof target)
        return fail(err, "path too long: %s/%s", dir, name);
    int in = open(source, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return fail_errno(err, "--file %s: open %s", name, source);
    int out = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return fail_errno(err, "--file %s: create %s", name, target);
    }
    int rc = 0;
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write_all(out, buf, (size_t)n)) {
            rc = fail_errno(err, "--file %s: write %s", name, target);
            break;
        }
    if (n < 0)
        rc = fail_errno(err, "--file %s: read %s", name, source);
    if (!rc && chown_to && fchown(out, uid, gid))
        rc = fail_errno(err, "--file %s: chown %s", name, target);
    close(in);
    close(out);
    return rc;
}

int make_host_dir(char *path, size_t cap, struct error *err)
{
    const char *base = getenv("TMPDIR");
    if (!base || base[0] != '/')
        base = "/tmp";
    if ((size_t)snprintf(path, cap, "%s/dnmopd-sandbox-XXXXXX", base) >= cap)
        return fail(err, "TMPDIR too long");
    return mkdtemp(path) ? 0 : fail_errno(err, "mkdtemp %s", path);
}

static void tree_usage_at(int dirfd, int depth, unsigned long long max_entries, unsigned long long *bytes,
                          unsigned long long *entries)
{
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        return;
    }
    rewinddir(d); /* a duplicate shares its offset with the descriptor it came from */
    for (struct dirent *e; *entries <= max_entries && (e = readdir(d));) {
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW))
            continue;
        ++*entries;
        *bytes += (unsigned long long)st.st_blocks * 512;
        if (!S_ISDIR(st.st_mode))
            continue;
        int sub = depth < 64 ? openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (sub >= 0)
            tree_usage_at(sub, depth + 1, max_entries, bytes, entries);
        else if (depth >= 64 || errno == EMFILE)
            *entries = max_entries + 1;
    }
    closedir(d);
}

void tree_usage(int dirfd, unsigned long long max_entries, unsigned long long *bytes, unsigned long long *entries)
{
    *bytes = *entries = 0;
    int fd = dup(dirfd);
    if (fd >= 0)
        tree_usage_at(fd, 0, max_entries, bytes, entries);
}

static void remove_entries(int dirfd)
{
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (unlinkat(dirfd, e->d_name, 0) == 0 || (errno != EISDIR && errno != EPERM))
            continue;
        fchmodat(dirfd, e->d_name, 0700, 0); /* the program may have left it unreadable */
        int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0)
            remove_entries(sub);
        unlinkat(dirfd, e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

int remove_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        chmod(path, 0700);
        remove_entries(fd);
    }
    return rmdir(path);
}
