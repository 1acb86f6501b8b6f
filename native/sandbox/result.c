/* Filling the run result and writing it out as JSON. */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "modes.h"
#include "report.h"

void record_exit(struct run_result *r, int status, int flags)
{
    r->finished = true;
    if (WIFSIGNALED(status))
        r->term_signal = WTERMSIG(status);
    else
        r->exit_code = WEXITSTATUS(status);
    if (r->limit == LIMIT_NONE && (flags & FLAG_CPU_LIMIT))
        r->limit = LIMIT_CPU;
    else if (r->limit == LIMIT_NONE && (flags & FLAG_FILE_SIZE_LIMIT))
        r->limit = LIMIT_FILE_SIZE;
}

enum outcome record_limit(struct run_result *r, enum event e, double started_at)
{
    r->limit = e == EVENT_WALL ? LIMIT_WALL : e == EVENT_OUTPUT ? LIMIT_OUTPUT : e == EVENT_DISK ? LIMIT_DISK
                                                                                  : LIMIT_MEMORY;
    r->term_signal = SIGKILL;
    r->wall_time_s = monotonic_seconds() - started_at;
    return RUN_OK;
}

void account_children(struct run_result *r)
{
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru))
        return;
    r->cpu_time_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
                    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    r->peak_memory_bytes = (long long)ru.ru_maxrss * 1024; /* the largest single process */
}

/* The length of the valid UTF-8 sequence at p (at most left bytes), or 0. */
static size_t utf8_length(const unsigned char *p, size_t left)
{
    unsigned char c = p[0];
    size_t want = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!want || want > left)
        return 0;
    uint32_t cp = c & (0x7f >> want);
    for (size_t k = 1; k < want; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    bool overlong = (want == 3 && cp < 0x800) || (want == 4 && cp < 0x10000);
    return overlong || (cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff ? 0 : want;
}

/* JSON string; invalid UTF-8 becomes U+FFFD so that the report is always valid JSON. */
static void put_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s, *end = p + n; p < end;) {
        unsigned char c = *p;
        size_t len = 1;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else if (c < 0x80)
            fputc(c, f);
        else if ((len = utf8_length(p, (size_t)(end - p))))
            fwrite(p, 1, len, f);
        else
            fputs("\\ufffd", f), len = 1;
        p += len;
    }
    fputc('"', f);
}

/* Base64 (RFC 4648, padded) as a JSON string: any bytes, 4/3 of their size. */
static void put_base64(FILE *f, const unsigned char *p, size_t n)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    fputc('"', f);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        char quad[4] = {digits[v >> 18], digits[(v >> 12) & 63], i + 1 < n ? digits[(v >> 6) & 63] : '=',
                        i + 2 < n ? digits[v & 63] : '='};
        fwrite(quad, 1, 4, f);
    }
    fputc('"', f);
}

void put_json_text(FILE *f, const char *value)
{
    if (value)
        put_string(f, value, strlen(value));
    else
        fputs("null", f);
}

static void put_text(FILE *f, const char *key, const char *value)
{
    fprintf(f, "\"%s\":", key);
    put_json_text(f, value);
}

static void put_capture(FILE *f, const char *key, const struct capture *c, unsigned long long limit)
{
    fprintf(f, "\"%s_base64\":", key);
    put_base64(f, (const unsigned char *)(c->data ? c->data : ""), c->kept);
    fprintf(f, ",\"%s_bytes\":%llu,\"%s_truncated\":%s", key, c->total, key, c->total > limit ? "true" : "false");
}

void print_report(FILE *f, const struct run_result *r, const struct options *o)
{
    fprintf(f, "{\"version\":%d,", REPORT_VERSION);
    put_text(f, "isolation", isolation_name(r->isolation));
    fputc(',', f);
    put_text(f, "fallback_reason", r->fallback_reason[0] ? r->fallback_reason : NULL);
    fprintf(f, ",\"proc_mounted\":%s,", r->proc_mounted ? "true" : "false");
    if (r->finished && !r->term_signal)
        fprintf(f, "\"exit_code\":%d,\"signal\":null,\"signal_name\":null,", r->exit_code);
    else {
        fprintf(f, "\"exit_code\":null,\"signal\":%d,", r->term_signal);
        put_text(f, "signal_name", signal_name(r->term_signal));
        fputc(',', f);
    }
    put_text(f, "limit", limit_name(r->limit));
    fprintf(f, ",\"cpu_time_s\":%.6f,\"wall_time_s\":%.6f,\"peak_memory_bytes\":%lld,", r->cpu_time_s,
            r->wall_time_s, r->peak_memory_bytes);
    put_capture(f, "stdout", &r->out, o->output_bytes);
    fputc(',', f);
    put_capture(f, "stderr", &r->err, o->output_bytes);
    fputs("}\n", f);
}

void print_error(FILE *f, const char *message)
{
    fprintf(f, "{\"version\":%d,", REPORT_VERSION);
    put_text(f, "error", message);
    fputs("}\n", f);
}
