#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "fs.h"
#include "proctree.h"

#define CHECK_MIN_INTERVAL_S 0.02
#define CHECK_MAX_SHARE 20 /* sample at most 1/20 of the time */

int make_pipe(int fds[2], struct error *err)
{
    return pipe2(fds, O_CLOEXEC) ? fail_errno(err, "pipe") : 0;
}

int make_output_channel(int fds[2], struct error *err)
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds))
        return fail_errno(err, "socketpair");
    shutdown(fds[0], SHUT_WR); /* the supervisor's end only reads, the program's only writes */
    shutdown(fds[1], SHUT_RD);
    return 0;
}

/* Returns true when the stream is now over the limit. */
static bool capture_chunk(struct capture *c, const char *buf, size_t n, unsigned long long limit)
{
    c->total += n;
    size_t take = c->kept < limit ? ((size_t)(limit - c->kept) < n ? (size_t)(limit - c->kept) : n) : 0;
    if (take && c->kept + take + 1 > c->capacity) {
        size_t capacity = c->capacity ? c->capacity : 4096;
        while (capacity < c->kept + take + 1)
            capacity *= 2;
        char *grown = realloc(c->data, capacity);
        if (!grown)
            take = 0; /* keep what we have; the byte count stays right */
        else
            c->data = grown, c->capacity = capacity;
    }
    if (take) {
        memcpy(c->data + c->kept, buf, take);
        c->kept += take;
        c->data[c->kept] = '\0';
    }
    return c->total > limit;
}

/* Reads what is available; returns true when the limit was exceeded. */
static bool pump(int *fd, struct capture *c, unsigned long long limit)
{
    char buf[65536];
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return false;
    if (n <= 0) {
        close(*fd);
        *fd = -1;
        c->eof = true;
        return false;
    }
    return capture_chunk(c, buf, (size_t)n, limit);
}

static int read_message(int fd, struct message *m)
{
    size_t got = 0;
    while (got < sizeof *m) {
        ssize_t n = read(fd, (char *)m + got, sizeof *m - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return got == 0 ? 0 : -1;
        got += (size_t)n;
    }
    return 1;
}

static int timeout_ms(double deadline)
{
    double left = deadline - monotonic_seconds();
    return left <= 0 ? 0 : (int)ceil(left * 1000.0);
}

void watch_usage(struct supervisor *s, pid_t root)
{
    s->tree_root = root;
    s->next_check = monotonic_seconds() + CHECK_MIN_INTERVAL_S;
}

/* EVENT_MEMORY or EVENT_DISK when a sample is due and over its limit, else EVENT_MESSAGE. */
static enum event over_limits(struct supervisor *s)
{
    double start = monotonic_seconds();
    if (s->tree_root <= 0 || start < s->next_check)
        return EVENT_MESSAGE;
    struct tree_usage usage;
    descendants_usage(s->tree_root, s->disk_fd >= 0, &usage);
    unsigned long long bytes = 0, entries = 0;
    if (s->disk_fd >= 0)
        tree_usage(s->disk_fd, s->entries_limit, &bytes, &entries);
    double now = monotonic_seconds(), spent = (now - start) * CHECK_MAX_SHARE;
    s->next_check = now + (spent > CHECK_MIN_INTERVAL_S ? spent : CHECK_MIN_INTERVAL_S);
    if (usage.rss_bytes > (long long)s->memory_limit)
        return EVENT_MEMORY;
    bool over_disk = bytes + (unsigned long long)usage.deleted_file_bytes > s->disk_limit || entries > s->entries_limit;
    return s->disk_fd >= 0 && over_disk ? EVENT_DISK : EVENT_MESSAGE;
}

enum event next_event(struct supervisor *s, struct message *m)
{
    for (;;) {
        struct pollfd fds[4] = {
            {.fd = s->out_fd, .events = POLLIN}, {.fd = s->err_fd, .events = POLLIN},
            {.fd = s->ctl_fd, .events = POLLIN}, {.fd = s->child_fd, .events = POLLIN},
        };
        if (monotonic_seconds() >= s->deadline)
            return EVENT_WALL;
        enum event over = over_limits(s);
        if (over != EVENT_MESSAGE)
            return over;
        double wake = s->tree_root > 0 && s->next_check < s->deadline ? s->next_check : s->deadline;
        int n = poll(fds, 4, timeout_ms(wake));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return EVENT_ERROR;
        if (fds[0].revents && pump(&s->out_fd, s->out, s->output_limit))
            return EVENT_OUTPUT;
        if (fds[1].revents && pump(&s->err_fd, s->err, s->output_limit))
            return EVENT_OUTPUT;
        if (fds[2].revents) {
            int rc = read_message(s->ctl_fd, m);
            if (rc > 0)
                return EVENT_MESSAGE;
            close(s->ctl_fd);
            s->ctl_fd = -1;
            return EVENT_CTL_CLOSED;
        }
        if (fds[3].revents) {
            struct signalfd_siginfo info;
            (void)!read(s->child_fd, &info, sizeof info);
            return EVENT_CHILD;
        }
    }
}

void drain_output(struct supervisor *s, double timeout_s)
{
    double until = monotonic_seconds() + timeout_s;
    while (s->out_fd >= 0 || s->err_fd >= 0) {
        struct pollfd fds[2] = {{.fd = s->out_fd, .events = POLLIN}, {.fd = s->err_fd, .events = POLLIN}};
        int n = poll(fds, 2, timeout_ms(until));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        /* Past the limit the data is counted but not kept; the run is over either way. */
        if (fds[0].revents)
            pump(&s->out_fd, s->out, s->output_limit);
        if (fds[1].revents)
            pump(&s->err_fd, s->err, s->output_limit);
    }
    if (s->out_fd >= 0)
        close(s->out_fd);
    if (s->err_fd >= 0)
        close(s->err_fd);
    s->out_fd = s->err_fd = -1;
}
