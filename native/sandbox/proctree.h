/* The processes of a run, found on the host through /proc: for killing them all and for measuring
 * their memory. (Descendants are found by parent links, so orphans must be reparented to the root:
 * the root is either a pid namespace's init or a child subreaper.) */
#ifndef DNMOPD_SANDBOX_PROCTREE_H
#define DNMOPD_SANDBOX_PROCTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* SIGKILLs every descendant of root that exists now; returns how many there were. */
size_t kill_descendants(pid_t root);
struct tree_usage {
    long long rss_bytes;          /* resident memory together (shared pages count in every process) */
    long long deleted_file_bytes; /* disk blocks of open files that no longer have a name */
};
/* What root's descendants hold; the open files are looked at only with count_files. */
void descendants_usage(pid_t root, bool count_files, struct tree_usage *usage);
/* Calls visit(pid, text of /proc/<pid>/<file>, arg) for every process on the host. */
void for_each_process(const char *file, void (*visit)(pid_t, const char *, void *), void *arg);

#endif
