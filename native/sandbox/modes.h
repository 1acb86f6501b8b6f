/* The two ways of running a program: inside fresh namespaces, or confined in place. */
#ifndef DNMOPD_SANDBOX_MODES_H
#define DNMOPD_SANDBOX_MODES_H

#include "run.h"
#include "supervise.h"

enum outcome { RUN_OK = 0, RUN_ERROR = -1, RUN_UNAVAILABLE = 1 };

/* The uid (and gid) a root caller's program runs as: unique per run, so that its process count and
 * its signals involve nothing else on the machine. */
unsigned run_id_for_root(void);

/* RUN_UNAVAILABLE: the kernel refused the namespaces (err says why); a weaker level may work.
 * With probe_only, builds the namespaces and the private root and runs nothing. */
enum outcome run_namespaces(const struct options *o, bool probe_only, struct run_result *r,
                            struct error *err);

/* ISOLATION_LANDLOCK or ISOLATION_SECCOMP. */
enum outcome run_in_place(const struct options *o, enum isolation level, struct run_result *r,
                          struct error *err);

/* Fills cpu time and peak memory from the reaped descendants. */
void account_children(struct run_result *r);
/* Status of the first process -> finished/exit_code/term_signal; limits found while reaping. */
void record_exit(struct run_result *r, int status, int flags);
/* EVENT_WALL, EVENT_OUTPUT or EVENT_MEMORY fired: the caller kills the program. Records the limit, the
 * SIGKILL and the wall time since started_at; returns RUN_OK. */
enum outcome record_limit(struct run_result *r, enum event e, double started_at);

#endif
