/*
 * dnmopd-sandbox: runs one untrusted program isolated and under resource limits, and reports what
 * happened as one JSON object on stdout. Exit status: 0 when a report was written (whatever the
 * program did), 2 for a usage error, 3 when the program could not be run (JSON {"error": ...}).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "landlock.h"
#include "modes.h"
#include "report.h"
#include "seccomp.h"

enum { EXIT_REPORTED = 0, EXIT_USAGE = 2, EXIT_NOT_RUN = 3 };

static bool seccomp_works(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(install_seccomp(false, getpid(), NULL) == 0 ? 0 : 1);
    int status;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* The strongest level this machine allows; why namespaces are not available goes to reason. */
static enum isolation strongest_level(const struct options *o, struct error *reason, bool *proc_mounted)
{
    struct run_result probe = {0};
    struct options quiet = *o;
    quiet.ro_count = 0; /* only the kernel's permission is in question here */
    quiet.file_count = 0;
    if (!seccomp_works()) {
        fail(reason, "seccomp filters are not available");
        return ISOLATION_AUTO;
    }
    if (run_namespaces(&quiet, true, &probe, reason) == RUN_OK) {
        *proc_mounted = probe.proc_mounted;
        return ISOLATION_NAMESPACES;
    }
    return landlock_abi() > 0 ? ISOLATION_LANDLOCK : ISOLATION_SECCOMP;
}

static int probe(const struct options *o)
{
    struct error reason = {{0}};
    bool proc_mounted = false;
    enum isolation best = strongest_level(o, &reason, &proc_mounted);
    printf("{\"version\":%d,\"best\":\"%s\",\"namespaces\":%s,\"proc_mounted\":%s,\"landlock_abi\":%d,"
           "\"seccomp\":%s,\"privileged\":%s,\"namespaces_error\":",
           REPORT_VERSION, best == ISOLATION_AUTO ? "none" : isolation_name(best),
           best == ISOLATION_NAMESPACES ? "true" : "false", proc_mounted ? "true" : "false", landlock_abi(),
           best == ISOLATION_AUTO ? "false" : "true", geteuid() == 0 ? "true" : "false");
    put_json_text(stdout, best == ISOLATION_NAMESPACES ? NULL : reason.message);
    printf("}\n");
    return EXIT_REPORTED;
}

static enum outcome run(const struct options *o, struct run_result *r, struct error *err)
{
    enum isolation level = o->isolation;
    for (size_t i = 0; i < o->ro_count; i++) /* the same check at every level */
        if (access(o->ro_paths[i], F_OK))
            return (enum outcome)fail_errno(err, "--ro %s", o->ro_paths[i]);
    if (level == ISOLATION_AUTO || level == ISOLATION_NAMESPACES) {
        r->isolation = ISOLATION_NAMESPACES;
        enum outcome outcome = run_namespaces(o, false, r, err);
        if (outcome != RUN_UNAVAILABLE || level == ISOLATION_NAMESPACES)
            return outcome == RUN_UNAVAILABLE ? RUN_ERROR : outcome;
        free(r->out.data);
        free(r->err.data);
        *r = (struct run_result){0};
        snprintf(r->fallback_reason, sizeof r->fallback_reason, "%s", err->message);
        level = landlock_abi() > 0 ? ISOLATION_LANDLOCK : ISOLATION_SECCOMP;
    }
    if (level == ISOLATION_LANDLOCK && landlock_abi() <= 0)
        return (enum outcome)fail(err, "--isolation=landlock: Landlock is not available on this kernel");
    r->isolation = level;
    return run_in_place(o, level, r, err);
}

int main(int argc, char **argv)
{
    struct options o;
    struct error err = {{0}};
    int parsed = parse_options(argc, argv, &o, &err);
    if (parsed) {
        if (parsed < 0)
            fprintf(stderr, "dnmopd-sandbox: %s\n", err.message);
        free_options(&o);
        return parsed < 0 ? EXIT_USAGE : EXIT_REPORTED;
    }
    /* Started with a standard stream closed, a pipe could take its number and swallow the report. */
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
            return EXIT_NOT_RUN;
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_DUMPABLE, 0); /* our memory holds the caller's environment */
    if (o.probe) {
        int rc = probe(&o);
        free_options(&o);
        return rc;
    }
    struct run_result r = {0};
    int rc = EXIT_REPORTED;
    if (run(&o, &r, &err) == RUN_OK) {
        /* Output past the limit that arrived after the program ended still exceeded it. */
        if (r.limit == LIMIT_NONE && (r.out.total > o.output_bytes || r.err.total > o.output_bytes))
            r.limit = LIMIT_OUTPUT;
        account_children(&r);
        print_report(stdout, &r, &o);
    } else {
        print_error(stdout, err.message);
        rc = EXIT_NOT_RUN;
    }
    free(r.out.data);
    free(r.err.data);
    free_options(&o);
    return fflush(stdout) == 0 ? rc : EXIT_NOT_RUN;
}
