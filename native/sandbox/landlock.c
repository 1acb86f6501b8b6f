#include "landlock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "run.h"

/* Spelled out here so that the build does not depend on how new the installed kernel headers are. */
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif
#define CREATE_RULESET_VERSION (1U << 0)
#define RULE_PATH_BENEATH 1

enum {
    FS_EXECUTE = 1 << 0, FS_WRITE_FILE = 1 << 1, FS_READ_FILE = 1 << 2, FS_READ_DIR = 1 << 3,
    FS_REMOVE_DIR = 1 << 4, FS_REMOVE_FILE = 1 << 5, FS_MAKE_CHAR = 1 << 6, FS_MAKE_DIR = 1 << 7,
    FS_MAKE_REG = 1 << 8, FS_MAKE_SOCK = 1 << 9, FS_MAKE_FIFO = 1 << 10, FS_MAKE_BLOCK = 1 << 11,
    FS_MAKE_SYM = 1 << 12, FS_REFER = 1 << 13, FS_TRUNCATE = 1 << 14, FS_IOCTL_DEV = 1 << 15,
};
enum { NET_BIND_TCP = 1 << 0, NET_CONNECT_TCP = 1 << 1 };
enum { SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0, SCOPE_SIGNAL = 1 << 1 };

struct ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net; /* ABI >= 4 */
    uint64_t scoped;             /* ABI >= 6 */
};

struct path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

static const uint64_t FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;

int landlock_abi(void)
{
    long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, CREATE_RULESET_VERSION);
    return abi > 0 ? (int)abi : 0;
}

static uint64_t handled_fs_rights(int abi)
{
    uint64_t rights = (FS_MAKE_SYM << 1) - 1; /* ABI 1: bits 0..12 */
    if (abi >= 2)
        rights |= FS_REFER;
    if (abi >= 3)
        rights |= FS_TRUNCATE;
    if (abi >= 5)
        rights |= FS_IOCTL_DEV;
    return rights;
}

/* Returns 0, 1 if the path does not exist and missing_ok, or -1. */
static int allow_beneath(int ruleset, const char *path, uint64_t rights, bool missing_ok, struct error *err)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) {
        if (missing_ok && errno == ENOENT)
            return 1;
        return fail_errno(err, "landlock: open %s", path);
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
        rights &= FILE_RIGHTS;
    struct path_beneath_attr rule = {.allowed_access = rights, .parent_fd = fd};
    long rc = syscall(__NR_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &rule, 0);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc ? fail_errno(err, "landlock: rule for %s", path) : 0;
}

/* Read rights beneath path, except inside the hidden directories: a directory holding one gets only
 * the listing right (which Landlock extends to everything beneath it), and each of its entries is
 * handled the same way; symbolic links get no rule (what they point to needs its own). */
static int allow_except_hidden(int ruleset, const struct options *o, const char *path, uint64_t rights,
                               bool missing_ok, struct error *err)
{
    if (path_hidden(o, path))
        return 0;
    bool hides_below = false;
    for (size_t i = 0; i < o->hidden_count && !hides_below; i++)
        hides_below = path_beneath(o->hidden_paths[i], path);
    if (!hides_below)
        return allow_beneath(ruleset, path, rights, missing_ok, err);
    int rc = allow_beneath(ruleset, path, rights & FS_READ_DIR, missing_ok, err);
    DIR *d = rc == 0 ? opendir(path) : NULL;
    if (rc)
        return rc < 0 ? -1 : 0;
    if (!d)
        return fail_errno(err, "landlock: list %s", path);
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        char child[PATH_MAX];
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if ((size_t)snprintf(child, sizeof child, "%s/%s", strcmp(path, "/") ? path : "", e->d_name) >= sizeof child)
            rc = fail(err, "landlock: path too long: %s/%s", path, e->d_name);
        else if (lstat(child, &st) == 0 && !S_ISLNK(st.st_mode))
            rc = allow_except_hidden(ruleset, o, child, rights, true, err) < 0 ? -1 : 0;
    }
    closedir(d);
    return rc;
}

static int add_rules(int ruleset, uint64_t handled, const struct options *o, const char *write_dir,
                     struct error *err)
{
    static const char *const devices[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
    const uint64_t read_exec = (FS_EXECUTE | FS_READ_FILE | FS_READ_DIR) & handled;
    for (unsigned long i = 0; !o->no_default_paths && i < default_ro_count; i++)
        if (allow_except_hidden(ruleset, o, default_ro_paths[i], read_exec, true, err) < 0)
            return -1;
    for (size_t i = 0; i < o->ro_count; i++) { /* one beneath a hidden directory was asked for explicitly */
        const char *path = o->ro_paths[i];
        if ((path_hidden(o, path) ? allow_beneath(ruleset, path, read_exec, false, err)
                                  : allow_except_hidden(ruleset, o, path, read_exec, false, err)) < 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
        if (allow_beneath(ruleset, devices[i], (FS_READ_FILE | FS_WRITE_FILE) & handled, true, err) < 0)
            return -1;
    return allow_beneath(ruleset, write_dir, handled, false, err) < 0 ? -1 : 0;
}

int apply_landlock(const struct options *o, const char *write_dir, struct error *err)
{
    int abi = landlock_abi();
    if (abi <= 0)
        return fail(err, "landlock is not available on this kernel");
    struct ruleset_attr attr = {.handled_access_fs = handled_fs_rights(abi)};
    size_t attr_size = sizeof attr.handled_access_fs;
    if (abi >= 4) {
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP; /* and no rule allows any port */
        attr_size += sizeof attr.handled_access_net;
    }
    if (abi >= 6) {
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
        attr_size += sizeof attr.scoped;
    }
    int ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, attr_size, 0);
    if (ruleset < 0)
        return fail_errno(err, "landlock: create ruleset (ABI %d)", abi);
    int rc = add_rules(ruleset, attr.handled_access_fs, o, write_dir, err);
    if (rc == 0 && syscall(__NR_landlock_restrict_self, ruleset, 0))
        rc = fail_errno(err, "landlock: restrict self");
    close(ruleset);
    return rc;
}
