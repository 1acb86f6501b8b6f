#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs.h"
#include "modes.h"
#include "supervise.h"

#define INNER_ID 1000          /* the program's uid and gid inside its user namespace */
#define SETUP_TIMEOUT_S 30.0   /* building the namespaces and the root */
#define NAMESPACES (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | \
                    CLONE_NEWUTS | CLONE_NEWCGROUP)

struct init_context {
    const struct options *o;
    const char *root;
    bool probe_only, privileged;
    int sync_fd, ctl_fd, out_fd, err_fd;
};

static void leave_on_alarm(int sig)
{
    (void)sig;
    _exit(2);
}

/* Should the supervisor vanish without killing us, the run still ends (well after the supervisor's
 * own deadline, which normally ends it). pid 1 of a namespace only gets signals it handles. */
static void arm_wall_guard(double seconds)
{
    struct sigaction sa = {.sa_handler = leave_on_alarm};
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval t = {.it_value = {.tv_sec = (time_t)seconds + 30}};
    setitimer(ITIMER_REAL, &t, NULL);
}

static pid_t start_program(const struct init_context *c)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    struct program_setup s = {
        .opts = c->o, .level = ISOLATION_NAMESPACES, .out_fd = c->out_fd, .err_fd = c->err_fd,
        .ctl_fd = c->ctl_fd, .workdir = SANDBOX_TMP, .drop_ids = true, .clear_groups = c->privileged,
        .uid = INNER_ID, .gid = INNER_ID,
        /* Unprivileged, this init shares the program's uid, so it counts against the limit. */
        .nproc = c->o->processes + (c->privileged ? 0 : 1),
    };
    exec_program(&s);
}

/* pid 1 of the new namespaces: builds the private root, starts the program, reaps until it ends. */
__attribute__((noreturn)) static void init_process(const struct init_context *c)
{
    char go;
    if (read(c->sync_fd, &go, 1) != 1)
        _exit(1);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_DUMPABLE, 0); /* keeps the caller's environment in our memory out of /proc/1 */
    struct error err = {{0}};
    bool proc_mounted = false;
    if (build_private_root(c->root, c->o, INNER_ID, INNER_ID, &proc_mounted, &err)) {
        send_message(c->ctl_fd, MSG_NAMESPACE_ERROR, 0, 0, 0, err.message);
        _exit(1);
    }
    sethostname("sandbox", 7);
    int proc_flag = proc_mounted ? FLAG_PROC_MOUNTED : 0;
    if (c->probe_only) {
        send_message(c->ctl_fd, MSG_EXITED, 0, proc_flag, 0, NULL);
        _exit(0);
    }
    arm_wall_guard(c->o->wall_time_s);
    struct reaper reaper = {.cpu_limit_s = c->o->cpu_time_s, .started_at = monotonic_seconds()};
    reaper.main_pid = start_program(c);
    if (reaper.main_pid < 0) {
        fail_errno(&err, "fork");
        send_message(c->ctl_fd, MSG_SETUP_ERROR, 0, 0, 0, err.message);
        _exit(1);
    }
    close(c->out_fd);
    close(c->err_fd);
    send_message(c->ctl_fd, MSG_STARTED, 0, proc_flag, 0, NULL);
    while (!reaper.main_done && !(reap_children(&reaper, true) < 0 && errno == ECHILD))
        ;
    send_message(c->ctl_fd, MSG_EXITED, reaper.main_status, reaper.flags | proc_flag,
                 reaper.main_wall_time_s, NULL);
    _exit(0); /* the kernel now kills whatever the program left behind */
}

static int write_id_maps(pid_t pid, bool privileged, struct error *err)
{
    char path[64], uid_map[64], gid_map[64];
    if (privileged) {
        unsigned id = run_id_for_root();
        snprintf(uid_map, sizeof uid_map, "0 0 1\n%d %u 1\n", INNER_ID, id);
        snprintf(gid_map, sizeof gid_map, "0 0 1\n%d %u 1\n", INNER_ID, id);
    } else {
        snprintf(uid_map, sizeof uid_map, "%d %u 1\n", INNER_ID, (unsigned)geteuid());
        snprintf(gid_map, sizeof gid_map, "%d %u 1\n", INNER_ID, (unsigned)getegid());
        snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
        if (write_file(path, "deny", err))
            return -1;
    }
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    if (write_file(path, uid_map, err))
        return -1;
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    return write_file(path, gid_map, err);
}

/* Runs the supervisor's side until the program ends, a limit fires or setup fails. */
static enum outcome supervise_namespaces(const struct options *o, pid_t init_pid, struct supervisor *sv,
                                         struct run_result *r, struct error *err)
{
    double started_at = 0;
    for (;;) {
        struct message m;
        enum event e = next_event(sv, &m);
        switch (e) {
        case EVENT_MESSAGE:
            if (m.kind == MSG_STARTED) {
                started_at = monotonic_seconds();
                sv->deadline = started_at + o->wall_time_s;
                watch_usage(sv, init_pid);
                r->proc_mounted = m.flags & FLAG_PROC_MOUNTED;
                continue;
            }
            if (m.kind == MSG_EXITED) {
                record_exit(r, m.status, m.flags);
                r->proc_mounted = m.flags & FLAG_PROC_MOUNTED;
                r->wall_time_s = m.wall_time_s;
                return RUN_OK;
            }
            fail(err, "%s", m.text);
            return m.kind == MSG_NAMESPACE_ERROR ? RUN_UNAVAILABLE : RUN_ERROR;
        case EVENT_WALL:
            if (started_at == 0) {
                fail(err, "setting up the namespaces took over %.0f s", SETUP_TIMEOUT_S);
                return RUN_ERROR;
            }
            return record_limit(r, e, started_at);
        case EVENT_OUTPUT:
        case EVENT_MEMORY:
        case EVENT_DISK:
            return record_limit(r, e, started_at);
        default:
            fail(err, "the sandbox's init process ended unexpectedly");
            return RUN_ERROR;
        }
    }
}

static void close_all(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

enum outcome run_namespaces(const struct options *o, bool probe_only, struct run_result *r, struct error *err)
{
    char root[4096];
    int sync[2], ctl[2], out[2], errp[2];
    if (make_host_dir(root, sizeof root, err))
        return RUN_ERROR;
    if (make_pipe(sync, err) || make_pipe(ctl, err) || make_output_channel(out, err) ||
        make_output_channel(errp, err)) {
        rmdir(root);
        return RUN_ERROR;
    }
    bool privileged = geteuid() == 0;
    fflush(NULL);
    /* The child must be dumpable until its id maps are written, or its /proc files belong to root.
     * Nothing untrusted runs yet; init turns it off again before it starts the program. */
    prctl(PR_SET_DUMPABLE, 1);
    pid_t pid = (pid_t)syscall(SYS_clone, NAMESPACES | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) {
        close_all((int[]){sync[1], ctl[0], out[0], errp[0]}, 4);
        struct init_context c = {o, root, probe_only, privileged, sync[0], ctl[1], out[1], errp[1]};
        init_process(&c);
    }
    int saved = errno;
    prctl(PR_SET_DUMPABLE, 0);
    close_all((int[]){sync[0], ctl[1], out[1], errp[1]}, 4);
    struct supervisor sv = {
        .out_fd = out[0], .err_fd = errp[0], .ctl_fd = ctl[0], .child_fd = -1,
        .output_limit = o->output_bytes, .deadline = monotonic_seconds() + SETUP_TIMEOUT_S,
        .memory_limit = o->memory_bytes, .disk_fd = -1, .out = &r->out, .err = &r->err,
    };
    enum outcome outcome = RUN_UNAVAILABLE;
    if (pid < 0) {
        errno = saved;
        fail_errno(err, "creating namespaces (clone)");
    } else {
        if (write_id_maps(pid, privileged, err) == 0 && write_all(sync[1], "x", 1) == 0)
            outcome = supervise_namespaces(o, pid, &sv, r, err);
        kill(pid, SIGKILL); /* ends the pid namespace, and with it every process the program made */
        waitpid(pid, NULL, 0);
        drain_output(&sv, 2.0);
    }
    close_all((int[]){sync[1], sv.ctl_fd, sv.out_fd, sv.err_fd}, 4);
    rmdir(root);
    return outcome;
}
