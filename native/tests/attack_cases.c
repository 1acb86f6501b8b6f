/* The attack cases: what each hostile program must run into, and what must not have happened. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attack_test.h"

static void case_fork_bomb(struct context *c)
{
    struct report r;
    run_sandbox(c, (const char *[]){"--wall-time=1", NULL}, "fork_bomb", NULL, NULL, &r);
    const char *out = report_get(&r, "stdout");
    int processes = count_lines(out, "fork_failed");
    char eagain[32];
    snprintf(eagain, sizeof eagain, "fork_failed errno=%d ", EAGAIN);
    expect(c, equals(report_get(&r, "limit"), "wall"), "limit %s, want wall", report_get(&r, "limit"));
    expect(c, count_lines(out, eagain) == processes && processes > 1,
           "every process must stop at EAGAIN: %s", out);
    expect(c, processes <= PROCESS_LIMIT, "%d processes ran; the limit is %d", processes, PROCESS_LIMIT);
    report_free(&r);
}

static void case_memory_bomb(struct context *c)
{
    struct report r; /* touching 256 MiB can take seconds on a loaded machine */
    run_sandbox(c, (const char *[]){"--wall-time=10", NULL}, "memory_bomb", NULL, NULL, &r);
    const char *out = report_get(&r, "stdout");
    int err = -1, mib = -1;
    sscanf(out, "malloc_failed errno=%d after_mib=%d", &err, &mib);
    expect(c, err == ENOMEM && mib >= 0 && mib < 256, "want ENOMEM below 256 MiB, got: %s", out);
    expect(c, equals(report_get(&r, "exit_code"), "0"), "the program should end normally");
    report_free(&r);
}

static void case_spread_memory(struct context *c)
{
    struct report r; /* 8 processes x 160 MiB: each under --memory, together far over it */
    run_sandbox(c, (const char *[]){"--wall-time=20", NULL}, "spread_memory", NULL, NULL, &r);
    expect(c, equals(report_get(&r, "limit"), "memory"), "limit %s, want memory", report_get(&r, "limit"));
    expect(c, equals(report_get(&r, "signal_name"), "SIGKILL") && report_number(&r, "wall_time_s") < 15,
           "the run must be killed as soon as its processes together exceed the limit");
    report_free(&r);
}

static void case_infinite_loop(struct context *c)
{
    struct report r;
    run_sandbox(c, (const char *[]){"--cpu-time=1", "--wall-time=10", NULL}, "infinite_loop", NULL, NULL, &r);
    expect(c, equals(report_get(&r, "limit"), "cpu"), "limit %s, want cpu", report_get(&r, "limit"));
    expect(c, equals(report_get(&r, "signal_name"), "SIGXCPU"), "signal %s", report_get(&r, "signal_name"));
    double cpu = report_number(&r, "cpu_time_s"), wall = report_number(&r, "wall_time_s");
    /* Tick-based accounting and a busy machine: generous bounds. */
    expect(c, cpu >= 0.8 && cpu < 2.5 && wall < 8, "cpu %.2f s, wall %.2f s", cpu, wall);
    report_free(&r);
}

static void case_sleep(struct context *c)
{
    struct report r;
    run_sandbox(c, (const char *[]){"--wall-time=1", NULL}, "sleep", NULL, NULL, &r);
    double wall = report_number(&r, "wall_time_s"), cpu = report_number(&r, "cpu_time_s");
    expect(c, equals(report_get(&r, "limit"), "wall"), "limit %s, want wall", report_get(&r, "limit"));
    expect(c, equals(report_get(&r, "signal_name"), "SIGKILL"), "signal %s", report_get(&r, "signal_name"));
    expect(c, wall >= 1.0 && wall < 2.5 && cpu < 0.5, "wall %.2f s, cpu %.2f s", wall, cpu);
    report_free(&r);
}

static void case_write_outside(struct context *c)
{
    struct report r;
    run_sandbox(c, NULL, "write_outside", (const char *[]){c->scratch, NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout");
    char line[4200];
    snprintf(line, sizeof line, "write path=%s/%s-written errno=0", c->scratch, c->token);
    expect(c, !strstr(out, line), "wrote into the caller's directory: %s", out);
    const char *dirs[] = {c->scratch, "/tmp", "/dev/shm", "/var/tmp"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s-written", dirs[i], c->token);
        bool exists = access(path, F_OK) == 0;
        /* The seccomp level confines by uid only: world-writable directories stay writable. */
        bool confined = i == 0 || strcmp(c->isolation, "seccomp") != 0;
        expect(c, !exists || !confined, "the program created %s on the host", path);
        if (exists)
            unlink(path);
    }
    report_free(&r);
}

static void case_read_secret(struct context *c)
{
    char path[128];
    snprintf(path, sizeof path, "%s/secret", c->scratch);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || write(fd, c->secret, strlen(c->secret)) < 0)
        exit(1);
    close(fd);
    struct report r;
    run_sandbox(c, NULL, "read_secret", (const char *[]){path, NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout");
    expect(c, !strstr(out, c->secret), "the secret leaked: %s", out);
    expect(c, strstr(out, "read errno=") != NULL, "want a read error, got: %s", out);
    report_free(&r);
}

static void case_network(struct context *c)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    socklen_t len = sizeof addr;
    int tcp = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (tcp < 0 || bind(tcp, (struct sockaddr *)&addr, len) || listen(tcp, 4) ||
        getsockname(tcp, (struct sockaddr *)&addr, &len))
        exit(1);
    int udp = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    bool have_udp = udp >= 0 && bind(udp, (struct sockaddr *)&addr, len) == 0;
    char port[16];
    snprintf(port, sizeof port, "%d", ntohs(addr.sin_port));
    struct report r;
    run_sandbox(c, NULL, "network", (const char *[]){port, NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout");
    expect(c, count_lines(out, "tcp4") == 1 && !strstr(out, "errno=0\n"), "a socket worked: %s", out);
    expect(c, accept(tcp, NULL, NULL) < 0 && errno == EAGAIN, "the listener got a connection");
    char byte;
    expect(c, !have_udp || (recv(udp, &byte, 1, 0) < 0 && errno == EAGAIN), "a UDP datagram arrived");
    report_free(&r);
}

static void case_unix_socket(struct context *c)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "/tmp/%s.sock", c->token);
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 4) ||
        chmod(addr.sun_path, 0777))
        exit(1);
    struct report r;
    run_sandbox(c, NULL, "unix_connect", (const char *[]){addr.sun_path, NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout");
    char refused[64];
    snprintf(refused, sizeof refused, "unix socket_errno=%d\n", EACCES);
    expect(c, strstr(out, refused) && strstr(out, "socketpair errno=0\n"), "unix sockets: %s", out);
    expect(c, accept(listener, NULL, NULL) < 0 && errno == EAGAIN, "the host's unix socket got a connection");
    close(listener);
    unlink(addr.sun_path);
    report_free(&r);
}

/* Whether /proc/sysvipc/<kind> lists an object with this key (the first column). */
static bool sysv_key_exists(const char *kind, long key)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/sysvipc/%s", kind);
    FILE *f = fopen(path, "r");
    bool found = false;
    while (f && fgets(line, sizeof line, f))
        found |= strtol(line, NULL, 10) == key;
    if (f)
        fclose(f);
    return found;
}

static void case_ipc(struct context *c)
{
    long key = 0x5a000000L | strtol(c->token + 26, NULL, 16); /* 6 hex digits of the token */
    char key_text[32], shm[128];
    snprintf(key_text, sizeof key_text, "%ld", key);
    struct report r;
    run_sandbox(c, NULL, "ipc_objects", (const char *[]){key_text, NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout");
    const char *refused[] = {"shmget", "shmat", "semget", "msgget", "mq_open", "memfd"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "%s errno=%d\n", refused[i], EPERM);
        expect(c, strstr(out, line) != NULL, "%s must be refused: %s", refused[i], out);
    }
    for (const char *const *kind = (const char *[]){"shm", "sem", "msg", NULL}; *kind; kind++)
        expect(c, !sysv_key_exists(*kind, key), "a SysV %s object outlived the run", *kind);
    snprintf(shm, sizeof shm, "/dev/shm/%s", c->token);
    bool left = access(shm, F_OK) == 0;
    /* The seccomp level confines no path: /dev/shm stays writable there (documented). */
    expect(c, !left || !strcmp(c->isolation, "seccomp"), "the program created %s on the host", shm);
    if (left)
        unlink(shm);
    report_free(&r);
}

/* The private temporary directory's quota: a full tmpfs (ENOSPC) with namespaces, the run killed with
 * limit "disk" at the other levels. */
static void fill_disk(struct context *c, const char *how)
{
    struct report r;
    /* CPU time as ample as wall time: on a slow disk (1 ms of system time per file created, seen on a loaded
     * machine) the 2,048 entries of "entries" would otherwise meet the default 2 s CPU limit first. */
    run_sandbox(c, (const char *[]){"--tmp-size=8M", "--wall-time=20", "--cpu-time=20", NULL}, "fill_disk",
                (const char *[]){how, NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout"), *limit = report_get(&r, "limit");
    if (!strcmp(c->isolation, "namespaces")) {
        int err = -1, made = -1;
        const char *line = strstr(out, "fill_failed");
        if (line)
            sscanf(line, "fill_failed errno=%d after=%d", &err, &made);
        int most = strcmp(how, "entries") ? 8 : 8 << 8; /* 8 MiB, or an entry per 4 KiB of it */
        expect(c, err == ENOSPC && made >= most / 2 && made <= most, "want ENOSPC within %d: %s", most, out);
    } else {
        expect(c, equals(limit, "disk") && equals(report_get(&r, "signal_name"), "SIGKILL"),
               "want limit disk, got %s: %s", limit ? limit : "none", out);
    }
    report_free(&r);
}

static void case_disk_files(struct context *c) { fill_disk(c, "files"); }
static void case_disk_unlinked(struct context *c) { fill_disk(c, "unlinked"); }
static void case_disk_entries(struct context *c) { fill_disk(c, "entries"); }

static void case_hidden(struct context *c)
{
    char visible[128], hidden[128], file[160], ro[200], hide[200];
    snprintf(visible, sizeof visible, "%s/visible", c->scratch);
    snprintf(hidden, sizeof hidden, "%s/hidden", c->scratch);
    if (chmod(c->scratch, 0755) || mkdir(visible, 0755) || mkdir(hidden, 0755))
        exit(1);
    snprintf(file, sizeof file, "%s/secret", hidden);
    FILE *f = fopen(file, "w");
    if (!f || fputs(c->secret, f) < 0 || fclose(f) || chmod(file, 0644))
        exit(1);
    snprintf(ro, sizeof ro, "--ro=%s", c->scratch);
    snprintf(hide, sizeof hide, "--hide=%s", hidden);
    struct report r;
    run_sandbox(c, (const char *[]){ro, hide, NULL}, "read_secret", (const char *[]){file, NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout");
    /* The seccomp level confines no path: it hides nothing (documented). */
    if (strcmp(c->isolation, "seccomp"))
        expect(c, !strstr(out, c->secret) && strstr(out, "read errno="), "a hidden file was read: %s", out);
    report_free(&r);
}

static void case_output_flood(struct context *c)
{
    struct report r;
    run_sandbox(c, NULL, "output_flood", NULL, NULL, &r);
    expect(c, equals(report_get(&r, "limit"), "output"), "limit %s, want output", report_get(&r, "limit"));
    expect(c, strlen(report_get(&r, "stdout")) == 65536 && equals(report_get(&r, "stdout_truncated"), "true") &&
                  report_number(&r, "stdout_bytes") > 65536,
           "stdout should be cut at 64 KiB");
    report_free(&r);
}

static void case_kill_parent(struct context *c)
{
    pid_t sentinel = fork();
    if (sentinel == 0) { /* an innocent process of the caller's */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1), dup2(null, 2);
        for (;;)
            pause();
    }
    char me[16], other[16];
    snprintf(me, sizeof me, "%d", (int)getpid());
    snprintf(other, sizeof other, "%d", (int)sentinel);
    struct report r;
    run_sandbox(c, NULL, "kill_parent", (const char *[]){me, other, NULL}, NULL, &r);
    expect(c, strstr(report_get(&r, "stdout"), "survived") && equals(report_get(&r, "exit_code"), "0"),
           "the run should end normally: %s", report_get(&r, "stdout"));
    expect(c, waitpid(sentinel, NULL, WNOHANG) == 0, "a process of the caller was killed");
    kill(sentinel, SIGKILL);
    waitpid(sentinel, NULL, 0);
    report_free(&r);
}

static void case_daemon(struct context *c)
{
    struct report r;
    run_sandbox(c, (const char *[]){"--wall-time=10", NULL}, "daemon", NULL, NULL, &r);
    expect(c, strstr(report_get(&r, "stdout"), "daemonized") && report_number(&r, "wall_time_s") < 2.5,
           "the run must end with its first process, not wait for the daemon");
    report_free(&r); /* check_no_survivors, run after every case, looks for the daemon */
}

static void case_host_proc(struct context *c)
{
    setenv("DNMOPD_SECRET", c->secret, 1); /* the sandbox itself inherits it */
    struct report r;
    run_sandbox(c, NULL, "host_proc", (const char *[]){"DNMOPD_SECRET", NULL}, NULL, &r);
    const char *out = report_get(&r, "stdout");
    int err = -1, visible = -1;
    const char *summary = strstr(out, "proc_open");
    if (summary)
        sscanf(summary, "proc_open errno=%d visible_pids=%d", &err, &visible);
    expect(c, !strstr(out, c->secret), "the caller's environment leaked: %s", out);
    expect(c, strcmp(c->isolation, "namespaces") || (visible >= 1 && visible <= PROCESS_LIMIT),
           "a private /proc shows only the sandbox's processes: %s", out);
    report_free(&r);
}

static void case_basics(struct context *c)
{
    struct report r;
    run_sandbox(c, NULL, "exit", (const char *[]){"7", NULL}, NULL, &r);
    expect(c, equals(report_get(&r, "isolation"), c->isolation), "isolation %s", report_get(&r, "isolation"));
    expect(c, equals(report_get(&r, "exit_code"), "7") && !report_get(&r, "signal") && !report_get(&r, "limit"),
           "exit code 7 without signal or limit");
    report_free(&r);
    run_sandbox(c, NULL, "abort", NULL, NULL, &r);
    expect(c, !report_get(&r, "exit_code") && equals(report_get(&r, "signal_name"), "SIGABRT"), "abort");
    report_free(&r);
    run_sandbox(c, NULL, "echo_stdin", NULL, "through stdin\n", &r);
    expect(c, equals(report_get(&r, "stdout"), "through stdin\n"), "stdin: %s", report_get(&r, "stdout"));
    report_free(&r);
    run_sandbox(c, NULL, "invalid_utf8", NULL, NULL, &r);
    expect(c, equals(report_get(&r, "stdout"), "bad\xff\xfe \xe2\x82\xac ok\n"), "bytes as written");
    report_free(&r);
}

static void case_files_and_file_size(struct context *c)
{
    char source[128], option[200];
    snprintf(source, sizeof source, "%s/given", c->scratch);
    FILE *f = fopen(source, "w");
    fputs("handed in", f);
    fclose(f);
    snprintf(option, sizeof option, "--file=given.txt=%s", source);
    struct report r;
    run_sandbox(c, (const char *[]){option, NULL}, "read_secret", (const char *[]){"given.txt", NULL}, NULL, &r);
    expect(c, strstr(report_get(&r, "stdout"), "content=handed in") != NULL, "--file: %s", report_get(&r, "stdout"));
    report_free(&r);
    run_sandbox(c, (const char *[]){"--file-size=1M", NULL}, "big_file", NULL, NULL, &r);
    expect(c, equals(report_get(&r, "limit"), "file_size") && equals(report_get(&r, "signal_name"), "SIGXFSZ"),
           "limit %s, signal %s", report_get(&r, "limit"), report_get(&r, "signal_name"));
    report_free(&r);
}

static void case_usage_errors(struct context *c)
{
    expect(c, run_sandbox(c, (const char *[]){"--memory=lots", NULL}, "exit", NULL, NULL, NULL) == 2,
           "a bad option must exit 2");
    expect(c, run_sandbox(c, (const char *[]){"--ro=relative/path", NULL}, "exit", NULL, NULL, NULL) == 2,
           "a relative --ro must exit 2");
    expect(c, run_sandbox(c, (const char *[]){"--ro=/does/not/exist", NULL}, "exit", NULL, NULL, NULL) == 3,
           "a missing --ro path must exit 3 (not run)");
    expect(c, run_sandbox(c, (const char *[]){"--hide=relative", NULL}, "exit", NULL, NULL, NULL) == 2 &&
                  run_sandbox(c, (const char *[]){"--hide=/", NULL}, "exit", NULL, NULL, NULL) == 2,
           "a relative --hide, or hiding /, must exit 2");
}

const struct attack_case attack_cases[] = {
    {"fork_bomb", case_fork_bomb, false},       {"memory_bomb", case_memory_bomb, false},
    {"spread_memory", case_spread_memory, false},
    {"infinite_loop", case_infinite_loop, false}, {"sleep", case_sleep, false},
    {"write_outside", case_write_outside, true}, {"read_secret", case_read_secret, true},
    {"network", case_network, false},           {"output_flood", case_output_flood, false},
    {"kill_parent", case_kill_parent, false},   {"daemon", case_daemon, false},
    {"host_proc", case_host_proc, true},        {"basics", case_basics, false},
    {"files", case_files_and_file_size, false}, {"usage_errors", case_usage_errors, false},
    {"unix_socket", case_unix_socket, false},   {"ipc", case_ipc, false},
    {"disk_files", case_disk_files, false},     {"disk_unlinked", case_disk_unlinked, false},
    {"disk_entries", case_disk_entries, false}, {"hidden", case_hidden, false},
};
const unsigned attack_case_count = sizeof attack_cases / sizeof attack_cases[0];
