/* The processes of a run, found on the host through /proc: for killing them all and for measuring
 * their memory. (Descendants are found by parent links, so orphans must be reparented to the root:
 * the root is either a pid namespace's init or a child subreaper.) */
#ifndef DNMOPD_SANDBOX_PROCTREE_H
#define DNMOPD_SANDBOX_PROCTREE_H

#include <stddef.h>
#include <sys/types.h>

/* SIGKILLs every descendant of root that exists now; returns how many there were. */
size_t kill_descendants(pid_t root);
/* Resident memory of root's descendants together (shared pages count in every process). */
long long descendants_rss_bytes(pid_t root);
/* Calls visit(pid, text of /proc/<pid>/<file>, arg) for every process on the host. */
void for_each_process(const char *file, void (*visit)(pid_t, const char *, void *), void *arg);

#endif
