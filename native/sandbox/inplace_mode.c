/* Levels without namespaces: the program runs in the caller's view of the system, confined by
 * Landlock (when available) and seccomp, under rlimits, as a private uid when the caller is root.
 * This process is the subreaper of everything the program starts, so it can find and kill it all. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"
#include "modes.h"
#include "proctree.h"
#include "supervise.h"

#define RUN_ID_BASE 0x40000000u

unsigned run_id_for_root(void)
{
    return RUN_ID_BASE + (unsigned)getpid();
}

struct task_count {
    uid_t uid;
    unsigned long tasks;
};

static void count_tasks(pid_t pid, const char *status, void *arg)
{
    (void)pid;
    struct task_count *c = arg;
    const char *uid = strstr(status, "\nUid:");
    const char *threads = strstr(status, "\nThreads:");
    if (uid && threads && strtoul(uid + 5, NULL, 10) == c->uid)
        c->tasks += strtoul(threads + 9, NULL, 10);
}

/* RLIMIT_NPROC counts every task of the real uid, so the budget starts from what already runs. */
static unsigned long tasks_of(uid_t uid)
{
    struct task_count c = {.uid = uid};
    for_each_process("status", count_tasks, &c);
    return c.tasks;
}

static void kill_tree(struct reaper *reaper)
{
    for (;;) {
        size_t found = kill_descendants(getpid());
        int rc = reap_children(reaper, false);
        if (found == 0 && rc < 0 && errno == ECHILD)
            return;
        usleep(1000);
    }
}

struct inplace {
    const struct options *o;
    enum isolation level;
    char workdir[4096];
    bool privileged;
    unsigned id; /* the uid (and gid) the program runs as */
};

static int prepare_workdir(struct inplace *p, struct error *err)
{
    if (make_host_dir(p->workdir, sizeof p->workdir, err))
        return -1;
    if (p->privileged && chown(p->workdir, p->id, p->id))
        return fail_errno(err, "chown %s", p->workdir);
    for (size_t i = 0; i < p->o->file_count; i++)
        if (copy_into(p->o->files[i].source, p->workdir, p->o->files[i].name, p->privileged, p->id, p->id, err))
            return -1;
    return 0;
}

static pid_t start_program(const struct inplace *p, int out_fd, int err_fd, int ctl_fd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    struct program_setup s = {
        .opts = p->o, .level = p->level, .out_fd = out_fd, .err_fd = err_fd, .ctl_fd = ctl_fd,
        .workdir = p->workdir, .drop_ids = p->privileged, .clear_groups = p->privileged,
        .uid = p->id, .gid = p->id,
        /* Unprivileged, this very process already counts as one of the uid's tasks. */
        .nproc = tasks_of(p->id) + p->o->processes - (p->privileged ? 0 : 1),
    };
    exec_program(&s);
}

static enum outcome supervise(struct supervisor *sv, struct reaper *reaper,
                              struct run_result *r, struct error *err)
{
    for (;;) {
        struct message m;
        enum event e = next_event(sv, &m);
        switch (e) {
        case EVENT_MESSAGE:
            fail(err, "%s", m.text); /* the only message here: setting up or executing failed */
            return RUN_ERROR;
        case EVENT_CTL_CLOSED: /* the command was executed */
            continue;
        case EVENT_CHILD:
            reap_children(reaper, false);
            if (!reaper->main_done)
                continue;
            r->wall_time_s = reaper->main_wall_time_s;
            record_exit(r, reaper->main_status, reaper->flags);
            return RUN_OK;
        case EVENT_WALL:
        case EVENT_OUTPUT:
        case EVENT_MEMORY:
        case EVENT_DISK:
            return record_limit(r, e, reaper->started_at);
        default:
            fail_errno(err, "supervising the program");
            return RUN_ERROR;
        }
    }
}

/* A setup error can race with the exit it causes: read what is left on the control pipe. */
static enum outcome late_setup_error(struct supervisor *sv, struct error *err)
{
    struct message m;
    if (sv->ctl_fd >= 0 && read(sv->ctl_fd, &m, sizeof m) == (ssize_t)sizeof m) {
        fail(err, "%s", m.text);
        return RUN_ERROR;
    }
    return RUN_OK;
}

enum outcome run_in_place(const struct options *o, enum isolation level, struct run_result *r, struct error *err)
{
    bool privileged = geteuid() == 0;
    struct inplace p = {
        .o = o, .level = level, .privileged = privileged, .id = privileged ? run_id_for_root() : getuid(),
    };
    int ctl[2], out[2], errp[2], workdir_fd = -1;
    if (prepare_workdir(&p, err) || make_pipe(ctl, err) || make_output_channel(out, err) ||
        make_output_channel(errp, err) ||
        (workdir_fd = open(p.workdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        if (workdir_fd < 0 && p.workdir[0] && !err->message[0])
            fail_errno(err, "open %s", p.workdir);
        if (p.workdir[0])
            remove_tree(p.workdir);
        return RUN_ERROR;
    }
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    int child_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct reaper reaper = {.cpu_limit_s = o->cpu_time_s, .started_at = monotonic_seconds()};
    fflush(NULL);
    reaper.main_pid = start_program(&p, out[1], errp[1], ctl[1]);
    close(ctl[1]), close(out[1]), close(errp[1]);
    struct supervisor sv = {
        .out_fd = out[0], .err_fd = errp[0], .ctl_fd = ctl[0], .child_fd = child_fd,
        .output_limit = o->output_bytes, .deadline = reaper.started_at + o->wall_time_s,
        .memory_limit = o->memory_bytes, .disk_fd = workdir_fd, .disk_limit = o->tmp_bytes,
        .entries_limit = tmp_entries_limit(o), .out = &r->out, .err = &r->err,
    };
    if (reaper.main_pid > 0)
        watch_usage(&sv, getpid());
    enum outcome outcome;
    if (reaper.main_pid < 0 || child_fd < 0)
        outcome = (enum outcome)fail_errno(err, "starting the program");
    else
        outcome = supervise(&sv, &reaper, r, err);
    kill_tree(&reaper);
    if (outcome == RUN_OK)
        outcome = late_setup_error(&sv, err);
    drain_output(&sv, 2.0);
    if (sv.ctl_fd >= 0)
        close(sv.ctl_fd);
    if (child_fd >= 0)
        close(child_fd);
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(workdir_fd);
    remove_tree(p.workdir);
    return outcome;
}
