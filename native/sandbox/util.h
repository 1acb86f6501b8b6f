/* Small helpers shared by the sandbox's modules: error messages, whole-buffer I/O, clocks. */
#ifndef DNMOPD_SANDBOX_UTIL_H
#define DNMOPD_SANDBOX_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define SANDBOX_ERROR_MAX 512

/* A setup failure: a message that names the step and, where there is one, strerror(errno). */
struct error {
    char message[SANDBOX_ERROR_MAX];
};

/* Formats into err (if non-NULL) and returns -1, so that callers can write `return fail(err, ...)`. */
int fail(struct error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, with ": strerror(errno)" appended. */
int fail_errno(struct error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* write(2) until everything is written or a real error happens (EINTR is retried). */
int write_all(int fd, const void *buf, size_t len);
/* Writes a whole small file (used for /proc/<pid>/uid_map and friends). */
int write_file(const char *path, const char *content, struct error *err);
/* Reads up to cap-1 bytes of a small file into buf (NUL-terminated); returns the length or -1. */
ssize_t read_small_file(const char *path, char *buf, size_t cap);

/* CLOCK_MONOTONIC in seconds. */
double monotonic_seconds(void);

/* A signal number's conventional name ("SIGKILL"), or NULL for unknown numbers. */
const char *signal_name(int sig);

#endif
