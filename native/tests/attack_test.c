/*
 * attack_test SANDBOX ATTACK LEVEL CASE: runs one hostile program (native/tests/attacks.c) through
 * dnmopd-sandbox at one isolation level, checks the report for the specific limit or error that
 * must stop it, and checks that the host is unharmed (no surviving process, no file written, no
 * connection made, no secret read). LEVEL may end in "-unprivileged": as root, the test then drops
 * to uid/gid 65534 first, to test what an ordinary user gets. Exit: 0 pass, 1 fail, 77 skipped.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attack_test.h"

#define SKIP 77

void expect(struct context *c, bool ok, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    c->failures++;
}

bool equals(const char *value, const char *want)
{
    return value && !strcmp(value, want);
}

static void random_hex(char *out, size_t n)
{
    unsigned char bytes[16];
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, bytes, sizeof bytes) != (ssize_t)sizeof bytes)
        exit(1);
    close(fd);
    for (size_t i = 0; i < n / 2 && i < sizeof bytes; i++)
        sprintf(out + 2 * i, "%02x", bytes[i]);
}

static char *read_all(int fd)
{
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (ssize_t n; (n = read(fd, buf + len, cap - len - 1)) != 0;) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        len += (size_t)n;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    return buf;
}

/* Runs the sandbox on `attack NAME TOKEN args...` with the test's default limits plus extra options. */
int run_sandbox(struct context *c, const char *const *options, const char *name, const char *const *args,
                const char *stdin_data, struct report *report)
{
    const char *argv[64];
    int n = 0;
    static char isolation[64], ro[4200];
    snprintf(isolation, sizeof isolation, "--isolation=%s", c->isolation);
    snprintf(ro, sizeof ro, "--ro=%s", c->attack_dir);
    const char *defaults[] = {c->sandbox, isolation, ro, "--wall-time=2", "--cpu-time=2", "--memory=256M",
                              "--processes=16", "--output=64K"};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        argv[n++] = defaults[i];
    for (; options && *options; options++)
        argv[n++] = *options;
    argv[n++] = "--", argv[n++] = c->attack, argv[n++] = name, argv[n++] = c->token;
    for (; args && *args; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    int out[2], in[2];
    if (pipe(out) || pipe(in))
        exit(1);
    if (stdin_data)
        (void)!write(in[1], stdin_data, strlen(stdin_data));
    close(in[1]);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0), dup2(out[1], 1);
        execv(c->sandbox, (char **)argv);
        _exit(126);
    }
    close(in[0]), close(out[1]);
    char *json = read_all(out[0]);
    close(out[0]);
    int status;
    waitpid(pid, &status, 0);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (report && (rc != 0 || report_parse(json, report))) {
        fprintf(stderr, "FAIL: the sandbox exited %d with report: %s\n", rc, json);
        exit(1);
    }
    free(json);
    return rc;
}

int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, prefix)); p++)
        n += p == text || p[-1] == '\n';
    return n;
}

/* No process on the host may still carry the token in its command line. */
static void check_no_survivors(struct context *c)
{
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[300], cmdline[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        ssize_t n = fd < 0 ? 0 : read(fd, cmdline, sizeof cmdline - 1);
        if (fd >= 0)
            close(fd);
        for (ssize_t i = 0; i < n; i++)
            if (!cmdline[i])
                cmdline[i] = ' ';
        cmdline[n > 0 ? n : 0] = '\0';
        expect(c, !strstr(cmdline, c->token), "process %s survived the run: %s", e->d_name, cmdline);
    }
    if (d)
        closedir(d);
}

static bool level_available(struct context *c)
{
    const char *argv[] = {c->sandbox, "--probe", NULL};
    int out[2];
    if (pipe(out))
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        execv(c->sandbox, (char **)argv);
        _exit(126);
    }
    close(out[1]);
    char *json = read_all(out[0]);
    waitpid(pid, NULL, 0);
    struct report r;
    if (report_parse(json, &r))
        exit(1);
    bool ok = equals(report_get(&r, "seccomp"), "true");
    if (!strcmp(c->isolation, "namespaces"))
        ok = ok && equals(report_get(&r, "namespaces"), "true");
    if (!strcmp(c->isolation, "landlock"))
        ok = ok && report_number(&r, "landlock_abi") > 0;
    if (!ok)
        fprintf(stderr, "SKIP: %s is not available here: %s", c->level, json);
    report_free(&r);
    free(json);
    return ok;
}

static int become_unprivileged(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "SKIP: the -unprivileged variants run only as root (this run is unprivileged already)\n");
        return SKIP;
    }
    if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534)) {
        perror("dropping to uid 65534");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: attack_test SANDBOX ATTACK LEVEL CASE\n");
        return 2;
    }
    struct context c = {.sandbox = argv[1], .attack = argv[2], .level = argv[3]};
    snprintf(c.isolation, sizeof c.isolation, "%.*s", (int)strcspn(c.level, "-"), c.level);
    snprintf(c.attack_dir, sizeof c.attack_dir, "%s", argv[2]);
    dirname(c.attack_dir);
    int rc = strstr(c.level, "-unprivileged") ? become_unprivileged() : 0;
    if (rc)
        return rc;
    c.privileged = geteuid() == 0;
    if (!level_available(&c))
        return SKIP;
    for (unsigned i = 0; i < attack_case_count; i++) {
        const struct attack_case *test = &attack_cases[i];
        if (strcmp(test->name, argv[4]))
            continue;
        if (test->needs_uid_change && !c.privileged && !strncmp(c.level, "seccomp", 7)) {
            fprintf(stderr, "SKIP: at the seccomp level an unprivileged caller's program runs as the caller "
                            "and can reach what the caller can (documented)\n");
            return SKIP;
        }
        random_hex(c.token, 32);
        random_hex(c.secret, 32);
        snprintf(c.scratch, sizeof c.scratch, "/tmp/sandbox-test-XXXXXX");
        if (!mkdtemp(c.scratch))
            return 1;
        test->run(&c);
        check_no_survivors(&c);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", c.scratch);
        if (system(cmd))
            fprintf(stderr, "warning: could not remove %s\n", c.scratch);
        fprintf(stderr, "%s: %s at level %s\n", c.failures ? "FAILED" : "passed", argv[4], c.level);
        return c.failures ? 1 : 0;
    }
    fprintf(stderr, "unknown case %s\n", argv[4]);
    return 2;
}
