/* The supervisor's event loop: captures output, receives control messages, watches the clock. */
#ifndef DNMOPD_SANDBOX_SUPERVISE_H
#define DNMOPD_SANDBOX_SUPERVISE_H

#include "run.h"

struct supervisor {
    int out_fd, err_fd; /* read ends of the program's stdout/stderr pipes */
    int ctl_fd;         /* read end of the control pipe; -1 once closed */
    int child_fd;       /* a signalfd for SIGCHLD, or -1 */
    unsigned long long output_limit;
    double deadline; /* CLOCK_MONOTONIC seconds */
    /* Once the program runs, its processes are the descendants of tree_root, and their resident memory
     * together is sampled (every 20 ms at least, less often where that takes long) against memory_limit.
     * Where the temporary directory is not a size-limited tmpfs, disk_fd is that directory, and its
     * files plus the nameless files the processes hold open are sampled against disk_limit bytes and
     * entries_limit entries. */
    pid_t tree_root;
    unsigned long long memory_limit;
    int disk_fd;
    unsigned long long disk_limit, entries_limit;
    double next_check;
    struct capture *out, *err;
};

enum event {
    EVENT_MESSAGE, EVENT_CTL_CLOSED, EVENT_CHILD, EVENT_WALL, EVENT_OUTPUT, EVENT_MEMORY, EVENT_DISK, EVENT_ERROR
};

/* Starts the sampling of root's descendants (and of disk_fd, when it is not -1). */
void watch_usage(struct supervisor *s, pid_t root);

/* Waits for the next thing the caller must act on; output is captured along the way. */
enum event next_event(struct supervisor *s, struct message *m);
/* Reads the rest of the output until both pipes reach end of file (or timeout_s passes). */
void drain_output(struct supervisor *s, double timeout_s);

int make_pipe(int fds[2], struct error *err);
/* The program's stdout or stderr: a unix stream pair rather than a pipe, because a pipe can be reopened
 * through /proc/<pid>/fd by any process of the program, which a trusted helper inside would not want. */
int make_output_channel(int fds[2], struct error *err);

#endif
