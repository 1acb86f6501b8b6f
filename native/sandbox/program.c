/* The program's own process: everything between fork and exec, and reaping what it leaves. */
#include <errno.h>
#include <grp.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "landlock.h"
#include "run.h"
#include "seccomp.h"

const char *const default_ro_paths[] = {
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
    "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives",
};
const unsigned long default_ro_count = sizeof default_ro_paths / sizeof default_ro_paths[0];

const char *limit_name(enum limit limit)
{
    static const char *const names[] = {NULL, "wall", "output", "memory", "cpu", "file_size", "disk"};
    return names[limit];
}

void send_message(int fd, int kind, int status, int flags, double wall_time_s, const char *text)
{
    struct message m = {.kind = kind, .status = status, .flags = flags, .wall_time_s = wall_time_s};
    if (text)
        snprintf(m.text, sizeof m.text, "%s", text);
    (void)write_all(fd, &m, sizeof m);
}

static void close_other_fds(int keep)
{
#ifdef __NR_close_range
    if (keep > 3 && syscall(__NR_close_range, 3, keep - 1, 0))
        goto slow;
    if (syscall(__NR_close_range, keep + 1, ~0U, 0) == 0)
        return;
slow:
#endif
    for (long fd = 3, max = sysconf(_SC_OPEN_MAX); fd < max; fd++)
        if (fd != keep)
            close((int)fd);
}

static int set_limit(int resource, rlim_t soft, rlim_t hard, const char *name, struct error *err)
{
    struct rlimit rl = {.rlim_cur = soft, .rlim_max = hard};
    return setrlimit(resource, &rl) ? fail_errno(err, "setrlimit(%s)", name) : 0;
}

static int set_limits(const struct program_setup *s, struct error *err)
{
    const struct options *o = s->opts;
    rlim_t cpu = (rlim_t)ceil(o->cpu_time_s);
    return set_limit(RLIMIT_CPU, cpu, cpu + 1, "CPU", err) ||
           set_limit(RLIMIT_AS, o->memory_bytes, o->memory_bytes, "AS", err) ||
           set_limit(RLIMIT_NPROC, s->nproc, s->nproc, "NPROC", err) ||
           set_limit(RLIMIT_FSIZE, o->file_size_bytes, o->file_size_bytes, "FSIZE", err) ||
           set_limit(RLIMIT_NOFILE, o->open_files, o->open_files, "NOFILE", err) ||
           set_limit(RLIMIT_CORE, 0, 0, "CORE", err) ||
           set_limit(RLIMIT_MSGQUEUE, 0, 0, "MSGQUEUE", err) ||
           set_limit(RLIMIT_MEMLOCK, 0, 0, "MEMLOCK", err) ? -1 : 0;
}

static int drop_identity(const struct program_setup *s, struct error *err)
{
    if (!s->drop_ids)
        return 0;
    if (s->clear_groups && setgroups(0, NULL))
        return fail_errno(err, "setgroups");
    if (setresgid(s->gid, s->gid, s->gid))
        return fail_errno(err, "setresgid(%u)", (unsigned)s->gid);
    if (setresuid(s->uid, s->uid, s->uid))
        return fail_errno(err, "setresuid(%u)", (unsigned)s->uid);
    return 0;
}

static int set_environment(const struct program_setup *s, struct error *err)
{
    /* static: putenv keeps the pointers, and this process execs right after */
    static char home[4096 + 8], tmpdir[4096 + 8];
    snprintf(home, sizeof home, "HOME=%s", s->workdir);
    snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", s->workdir);
    if (clearenv() || putenv("PATH=/usr/local/bin:/usr/bin:/bin") || putenv("LANG=C.UTF-8") ||
        putenv(home) || putenv(tmpdir))
        return fail_errno(err, "environment");
    for (size_t i = 0; i < s->opts->env_count; i++)
        if (putenv((char *)s->opts->env[i]))
            return fail_errno(err, "environment: %s", s->opts->env[i]);
    return 0;
}

static int confine(const struct program_setup *s, struct error *err)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL)) /* after the uid change, which clears it */
        return fail_errno(err, "prctl(PR_SET_PDEATHSIG)");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        return fail_errno(err, "prctl(PR_SET_NO_NEW_PRIVS)");
    if (s->level == ISOLATION_LANDLOCK && apply_landlock(s->opts, s->workdir, err))
        return -1;
    return install_seccomp(s->level != ISOLATION_NAMESPACES, getpid(), err);
}

void exec_program(const struct program_setup *s)
{
    struct error err = {{0}};
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (setsid() < 0 || dup2(s->out_fd, STDOUT_FILENO) < 0 || dup2(s->err_fd, STDERR_FILENO) < 0) {
        fail_errno(&err, "redirecting output");
        goto failed;
    }
    close_other_fds(s->ctl_fd);
    if (chdir(s->workdir)) {
        fail_errno(&err, "chdir %s", s->workdir);
        goto failed;
    }
    if (set_limits(s, &err) || drop_identity(s, &err) || confine(s, &err))
        goto failed;
    if (set_environment(s, &err))
        goto failed;
    execvp(s->opts->command[0], s->opts->command);
    fail_errno(&err, "exec %s", s->opts->command[0]);
failed:
    send_message(s->ctl_fd, MSG_SETUP_ERROR, 0, 0, 0, err.message);
    _exit(127);
}

static int exit_flags(int status, const struct rusage *ru, double cpu_limit_s)
{
    if (!WIFSIGNALED(status))
        return 0;
    int sig = WTERMSIG(status);
    double cpu = (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec * 1e-6 +
                 (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec * 1e-6;
    /* SIGXCPU at the soft limit; SIGKILL at the hard limit when SIGXCPU was caught or ignored. */
    if (sig == SIGXCPU || (sig == SIGKILL && cpu >= ceil(cpu_limit_s)))
        return FLAG_CPU_LIMIT;
    return sig == SIGXFSZ ? FLAG_FILE_SIZE_LIMIT : 0;
}

int reap_children(struct reaper *r, bool block)
{
    for (;;) {
        int status;
        struct rusage ru;
        pid_t pid = wait4(-1, &status, block ? 0 : WNOHANG, &ru);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return pid;
        r->flags |= exit_flags(status, &ru, r->cpu_limit_s);
        if (pid == r->main_pid) {
            r->main_done = true;
            r->main_status = status;
            r->main_wall_time_s = monotonic_seconds() - r->started_at;
        }
        block = false;
    }
}
