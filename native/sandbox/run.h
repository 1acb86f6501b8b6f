/* What the two run modes share: the result, the control messages, the program's own setup. */
#ifndef DNMOPD_SANDBOX_RUN_H
#define DNMOPD_SANDBOX_RUN_H

#include <stdbool.h>
#include <sys/types.h>

#include "options.h"
#include "util.h"

/* Which limit ended or interrupted the run. */
enum limit { LIMIT_NONE, LIMIT_WALL, LIMIT_OUTPUT, LIMIT_MEMORY, LIMIT_CPU, LIMIT_FILE_SIZE, LIMIT_DISK };
const char *limit_name(enum limit limit);

struct capture {
    char *data;
    size_t kept;                /* bytes in data (at most the output limit) */
    size_t capacity;
    unsigned long long total;   /* bytes the program wrote */
    bool eof;
};

struct run_result {
    enum isolation isolation;
    char fallback_reason[SANDBOX_ERROR_MAX]; /* why a stronger level was not used (auto only) */
    bool proc_mounted;
    bool finished;      /* the program's first process ended by itself */
    int exit_code;      /* valid when finished and not signaled */
    int term_signal;    /* 0 unless the first process was killed by a signal (or by us) */
    enum limit limit;
    double cpu_time_s, wall_time_s;
    long long peak_memory_bytes;
    struct capture out, err;
};

/* Messages from the sandbox side (init, program child) to the supervisor; one write each, atomic. */
enum message_kind {
    MSG_NAMESPACE_ERROR = 1, /* building the namespaces failed: a weaker level may still work */
    MSG_SETUP_ERROR,         /* preparing or executing the program failed */
    MSG_STARTED,             /* the program's process exists (the wall clock starts) */
    MSG_EXITED,              /* the program's first process ended */
};
enum { FLAG_CPU_LIMIT = 1, FLAG_FILE_SIZE_LIMIT = 2, FLAG_PROC_MOUNTED = 4 };

struct message {
    int kind;
    int status; /* wait status (MSG_EXITED) */
    int flags;
    double wall_time_s;
    char text[SANDBOX_ERROR_MAX];
};

void send_message(int fd, int kind, int status, int flags, double wall_time_s, const char *text);

/* How the program's own process is prepared between fork and exec. */
struct program_setup {
    const struct options *opts;
    enum isolation level;
    int out_fd, err_fd, ctl_fd;
    const char *workdir;
    bool drop_ids, clear_groups;
    uid_t uid;
    gid_t gid;
    unsigned long nproc; /* RLIMIT_NPROC: counts all tasks of the uid in its user namespace */
};

/* Sets up fds, limits, identity, Landlock, seccomp and the environment, then execs the command.
 * On failure sends MSG_SETUP_ERROR on ctl_fd and exits 127. */
__attribute__((noreturn)) void exec_program(const struct program_setup *s);

/* Reaps children; remembers the first process's status and whether any process hit a limit. */
struct reaper {
    pid_t main_pid;
    bool main_done;
    int main_status;
    int flags;
    double cpu_limit_s;
    double started_at, main_wall_time_s;
};
/* Reaps what can be reaped (blocking until at least one child when block is true).
 * Returns -1 with errno ECHILD when there are no children left. */
int reap_children(struct reaper *r, bool block);

/* Read-only system paths every program gets (those missing on this machine are skipped). */
extern const char *const default_ro_paths[];
extern const unsigned long default_ro_count;

#endif
