/*
 * sandbox-attack NAME TOKEN [ARGS...]: hostile programs for the sandbox's tests. Each prints
 * `key=value` lines about what it managed to do; TOKEN only marks the processes (argv is inherited
 * by forks) so that the tests can look for survivors on the host.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static __attribute__((noreturn)) int fork_bomb(void)
{
    int made = 0;
    for (;;) {
        pid_t pid = fork();
        if (pid == 0) { /* every child keeps forking too */
            made = 0;
            continue;
        }
        if (pid < 0)
            break;
        made++;
    }
    printf("fork_failed errno=%d after=%d\n", errno, made);
    fflush(stdout);
    for (;;)
        pause();
}

static int memory_bomb(void)
{
    const size_t chunk = 16u << 20;
    size_t total = 0;
    for (char *p; (p = malloc(chunk)); total += chunk)
        memset(p, 1, chunk);
    printf("malloc_failed errno=%d after_mib=%zu\n", errno, total >> 20);
    return 0;
}

/* Memory spread over processes, each under the per-process limit. */
static __attribute__((noreturn)) int spread_memory(void)
{
    for (int i = 0; i < 7; i++)
        if (fork() == 0)
            break;
    const size_t chunk = 32u << 20;
    for (int i = 0; i < 5; i++) {
        char *p = malloc(chunk);
        if (p)
            memset(p, 1, chunk);
    }
    printf("holding\n");
    fflush(stdout);
    for (;;)
        pause();
}

static __attribute__((noreturn)) int infinite_loop(void)
{
    for (volatile unsigned long x = 0;; x++)
        ;
}

static int sleep_forever(void)
{
    sleep(3600);
    return 0;
}

static int write_outside(const char *token, const char *caller_dir)
{
    const char *dirs[] = {caller_dir, "/tmp", "/dev/shm", "/var/tmp", ".."};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-written", dirs[i], token);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        printf("write path=%s errno=%d\n", path, fd < 0 ? errno : 0);
        if (fd >= 0)
            close(fd);
    }
    return 0;
}

static int read_file(const char *path)
{
    char buf[256] = {0};
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("read errno=%d\n", errno);
        return 1;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    printf("read bytes=%zd content=%s\n", n, buf);
    return 0;
}

static void try_connect(const char *what, int family, int type, const struct sockaddr *addr, socklen_t len)
{
    int fd = socket(family, type, 0);
    if (fd < 0) {
        printf("%s socket_errno=%d\n", what, errno);
        return;
    }
    int rc = type == SOCK_DGRAM ? (int)sendto(fd, "x", 1, 0, addr, len) : connect(fd, addr, len);
    printf("%s connect_errno=%d\n", what, rc < 0 ? errno : 0);
    close(fd);
}

static int network(const char *port_text)
{
    int port = atoi(port_text);
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &v4.sin_addr);
    inet_pton(AF_INET6, "::1", &v6.sin6_addr);
    try_connect("tcp4", AF_INET, SOCK_STREAM, (struct sockaddr *)&v4, sizeof v4);
    try_connect("tcp6", AF_INET6, SOCK_STREAM, (struct sockaddr *)&v6, sizeof v6);
    try_connect("udp4", AF_INET, SOCK_DGRAM, (struct sockaddr *)&v4, sizeof v4);
    int raw = socket(AF_PACKET, SOCK_RAW, 0);
    printf("packet socket_errno=%d\n", raw < 0 ? errno : 0);
    return 0;
}

/* A unix socket to a host path, and a socket pair (which reaches nothing outside). */
static int unix_connect(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    try_connect("unix", AF_UNIX, SOCK_STREAM, (struct sockaddr *)&addr, sizeof addr);
    int pair[2];
    printf("socketpair errno=%d\n", socketpair(AF_UNIX, SOCK_STREAM, 0, pair) ? errno : 0);
    return 0;
}

/* SysV shared memory, semaphores and message queues under a key the test can look for, a POSIX
 * message queue, memory file descriptors, and POSIX shared memory (a file in /dev/shm). */
static int ipc_objects(const char *token, const char *key_text)
{
    key_t key = (key_t)strtol(key_text, NULL, 10);
    printf("shmget errno=%d\n", shmget(key, 1 << 20, IPC_CREAT | 0666) < 0 ? errno : 0);
    printf("shmat errno=%d\n", shmat(0, NULL, 0) == (void *)-1 ? errno : 0); /* a guessed id */
    printf("semget errno=%d\n", semget(key, 1, IPC_CREAT | 0666) < 0 ? errno : 0);
    printf("msgget errno=%d\n", msgget(key, IPC_CREAT | 0666) < 0 ? errno : 0);
    char name[64];
    snprintf(name, sizeof name, "/%s", token);
    printf("mq_open errno=%d\n", syscall(SYS_mq_open, name + 1, O_CREAT | O_RDWR, 0666, NULL) < 0 ? errno : 0);
    printf("memfd errno=%d\n", syscall(SYS_memfd_create, "hoard", 0) < 0 ? errno : 0);
    char shm[96];
    snprintf(shm, sizeof shm, "/dev/shm%s", name);
    int fd = open(shm, O_CREAT | O_RDWR, 0666);
    printf("dev_shm errno=%d\n", fd < 0 ? errno : 0);
    if (fd >= 0)
        close(fd);
    return 0;
}

/* Fills the working directory with 1 MiB files (unlinked while open with "unlinked", or empty files
 * with "entries") until a write fails, or waits to be killed. */
static int fill_disk(const char *how)
{
    static char block[1 << 20];
    memset(block, 7, sizeof block);
    bool unlinked = !strcmp(how, "unlinked"), entries = !strcmp(how, "entries");
    int made = 0, err = 0;
    for (; made < (entries ? 1 << 20 : 256) && !err; made++) {
        char name[32];
        snprintf(name, sizeof name, "fill%d", made);
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 || (!entries && write(fd, block, sizeof block) != (ssize_t)sizeof block))
            err = errno ? errno : EIO;
        if (unlinked && fd >= 0)
            unlink(name); /* keep it open: its blocks stay used */
        else if (fd >= 0)
            close(fd);
    }
    printf("fill_failed errno=%d after=%d\n", err, made - 1);
    if (err != ENOSPC) /* no full tmpfs stopped it (EMFILE keeps the unlinked files): wait for the sandbox */
        sleep(60);
    return 0;
}

static int output_flood(void)
{
    static char block[65536];
    memset(block, 'x', sizeof block);
    for (;;)
        if (write(STDOUT_FILENO, block, sizeof block) < 0)
            return 1;
}

static int kill_parent(const char *caller_pid, const char *sentinel_pid)
{
    const struct {
        const char *what;
        pid_t pid;
    } targets[] = {{"parent", getppid()}, {"init", 1}, {"everyone", -1},
                   {"caller", (pid_t)atoi(caller_pid)}, {"sentinel", (pid_t)atoi(sentinel_pid)}};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        printf("kill %s errno=%d\n", targets[i].what, kill(targets[i].pid, SIGKILL) ? errno : 0);
    printf("survived\n");
    return 0;
}

static int daemonize(void)
{
    pid_t child = fork();
    if (child == 0) {
        setsid();
        if (fork() == 0) {
            close(0), close(1), close(2);
            signal(SIGHUP, SIG_IGN);
            sleep(30);
            _exit(0);
        }
        _exit(0);
    }
    waitpid(child, NULL, 0);
    printf("daemonized\n");
    return 0;
}

/* Looks for `name=` in every /proc/<pid>/environ it can read, and in /proc/1 and the parent. */
static int host_proc(const char *name)
{
    DIR *d = opendir("/proc");
    int visible = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        visible++;
        char path[300], buf[65536];
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        int fd = open(path, O_RDONLY);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
        if (fd >= 0)
            close(fd);
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(buf + i) + 1) {
            buf[n] = '\0';
            if (!strncmp(buf + i, name, strlen(name)) && buf[i + strlen(name)] == '=')
                printf("leak path=%s value=%s\n", path, buf + i + strlen(name) + 1);
        }
    }
    if (d)
        closedir(d);
    printf("proc_open errno=%d visible_pids=%d\n", d ? 0 : errno, visible);
    return 0;
}

static int write_big_file(void)
{
    static char block[65536];
    int fd = open("big", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int i = 0; i < 64 && fd >= 0; i++)
        if (write(fd, block, sizeof block) < 0)
            return 2;
    return fd < 0;
}

static int echo_stdin(void)
{
    char buf[4096];
    ssize_t n;
    while ((n = read(STDIN_FILENO, buf, sizeof buf)) > 0)
        fwrite(buf, 1, (size_t)n, stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: sandbox-attack NAME TOKEN [ARGS...]\n");
        return 64;
    }
    const char *name = argv[1], *arg1 = argc > 3 ? argv[3] : "", *arg2 = argc > 4 ? argv[4] : "";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(name, "fork_bomb")) return fork_bomb();
    if (!strcmp(name, "memory_bomb")) return memory_bomb();
    if (!strcmp(name, "spread_memory")) return spread_memory();
    if (!strcmp(name, "infinite_loop")) return infinite_loop();
    if (!strcmp(name, "sleep")) return sleep_forever();
    if (!strcmp(name, "write_outside")) return write_outside(argv[2], arg1);
    if (!strcmp(name, "read_secret")) return read_file(arg1);
    if (!strcmp(name, "network")) return network(arg1);
    if (!strcmp(name, "unix_connect")) return unix_connect(arg1);
    if (!strcmp(name, "ipc_objects")) return ipc_objects(argv[2], arg1);
    if (!strcmp(name, "fill_disk")) return fill_disk(arg1);
    if (!strcmp(name, "output_flood")) return output_flood();
    if (!strcmp(name, "kill_parent")) return kill_parent(arg1, arg2);
    if (!strcmp(name, "daemon")) return daemonize();
    if (!strcmp(name, "host_proc")) return host_proc(arg1);
    if (!strcmp(name, "big_file")) return write_big_file();
    if (!strcmp(name, "echo_stdin")) return echo_stdin();
    if (!strcmp(name, "abort")) abort();
    if (!strcmp(name, "invalid_utf8")) return printf("bad\xff\xfe \xe2\x82\xac ok\n") < 0;
    if (!strcmp(name, "exit")) return atoi(arg1);
    fprintf(stderr, "unknown attack %s\n", name);
    return 64;
}
