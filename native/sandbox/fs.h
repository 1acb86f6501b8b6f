/* The private root a namespaced program sees, and file helpers shared with the other levels. */
#ifndef DNMOPD_SANDBOX_FS_H
#define DNMOPD_SANDBOX_FS_H

#include <stdbool.h>
#include <sys/types.h>

#include "options.h"
#include "util.h"

#define SANDBOX_TMP "/tmp" /* the program's private writable directory (namespaces mode) */

/*
 * Inside a fresh mount namespace: mounts a tmpfs at root_dir, exposes the default and the requested
 * read-only paths there (bind mounts, read-only and nosuid recursively), a minimal /dev, a private
 * /proc (when the kernel allows it: *proc_mounted tells), a size-limited writable /tmp holding the
 * requested files, owned by uid/gid; then makes it the root (pivot_root) and remounts it read-only.
 */
int build_private_root(const char *root_dir, const struct options *o, uid_t uid, gid_t gid,
                       bool *proc_mounted, struct error *err);

/* Copies host file source to dir/name (mode 0644, owned by uid/gid when chown_to is true). */
int copy_into(const char *source, const char *dir, const char *name, bool chown_to, uid_t uid, gid_t gid,
              struct error *err);

/* Creates a fresh 0700 directory under $TMPDIR (or /tmp) into path[cap]. */
int make_host_dir(char *path, size_t cap, struct error *err);
/* Disk blocks (bytes) and entries of the tree beneath dirfd, without following symlinks; stops early
 * once more than max_entries are found or the tree is deeper than 64 (both count as max_entries + 1). */
void tree_usage(int dirfd, unsigned long long max_entries, unsigned long long *bytes,
                unsigned long long *entries);
/* Removes a directory tree without following symlinks. */
int remove_tree(const char *path);

#endif
