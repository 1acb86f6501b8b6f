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
     * together is sampled (every 20 ms at least, less often where /proc is large) against memory_limit. */
    pid_t tree_root;
    unsigned long long memory_limit;
    double next_memory_check;
    struct capture *out, *err;
};

enum event { EVENT_MESSAGE, EVENT_CTL_CLOSED, EVENT_CHILD, EVENT_WALL, EVENT_OUTPUT, EVENT_MEMORY, EVENT_ERROR };

/* Starts the memory sampling of root's descendants. */
void watch_memory(struct supervisor *s, pid_t root);

/* Waits for the next thing the caller must act on; output is captured along the way. */
enum event next_event(struct supervisor *s, struct message *m);
/* Reads the rest of the output until both pipes reach end of file (or timeout_s passes). */
void drain_output(struct supervisor *s, double timeout_s);

int make_pipe(int fds[2], struct error *err);

#endif
