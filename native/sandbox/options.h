/* Command-line options of dnmopd-sandbox. */
#ifndef DNMOPD_SANDBOX_OPTIONS_H
#define DNMOPD_SANDBOX_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "util.h"

/* Strongest first. AUTO picks the strongest one that this kernel and this caller allow. */
enum isolation {
    ISOLATION_AUTO,
    ISOLATION_NAMESPACES, /* user+pid+mount+net+ipc+uts+cgroup namespaces, private root; + rlimits, seccomp */
    ISOLATION_LANDLOCK,   /* no namespaces: Landlock file/network/signal rules + rlimits + seccomp */
    ISOLATION_SECCOMP,    /* no namespaces, no Landlock: rlimits + seccomp (+ a private uid when root) */
};

const char *isolation_name(enum isolation level);

/* --file NAME=SOURCE: SOURCE (a host file) is copied into the sandbox's temporary directory as NAME. */
struct file_copy {
    const char *name;
    const char *source;
};

struct options {
    enum isolation isolation;
    double cpu_time_s;               /* per process, RLIMIT_CPU (rounded up to whole seconds) */
    double wall_time_s;              /* whole run */
    unsigned long long memory_bytes; /* per process (RLIMIT_AS) and all processes together (resident) */
    unsigned long processes;         /* tasks (processes and threads) at once, RLIMIT_NPROC */
    unsigned long long file_size_bytes; /* per file, RLIMIT_FSIZE */
    unsigned long open_files;        /* per process, RLIMIT_NOFILE */
    unsigned long long output_bytes; /* per stream; more output ends the run */
    unsigned long long tmp_bytes;    /* size of the private temporary directory (every level) */
    const char **ro_paths;           /* extra read-only paths (absolute) */
    size_t ro_count;
    const char **hidden_paths;       /* directories masked inside the exposed ones (absolute) */
    size_t hidden_count;
    bool no_default_paths;           /* expose only ro_paths, not default_ro_paths */
    struct file_copy *files;
    size_t file_count;
    const char **env; /* KEY=VALUE added to the program's otherwise minimal environment */
    size_t env_count;
    char **command; /* NULL-terminated; command[0] is looked up on the sandbox's PATH */
    bool probe;
};

/* Files and directories the private temporary directory may hold (1 per 4 KiB of --tmp-size). */
static inline unsigned long long tmp_entries_limit(const struct options *o)
{
    return o->tmp_bytes / 4096 < 64 ? 64 : o->tmp_bytes / 4096;
}

/* path is dir or lies beneath it (both absolute, without trailing slashes). */
bool path_beneath(const char *path, const char *dir);
/* The path is one of the hidden directories or lies beneath one. */
bool path_hidden(const struct options *o, const char *path);

/* Fills opts from argv. Returns 0, 1 when --help was printed, or -1 with a message in err. */
int parse_options(int argc, char **argv, struct options *opts, struct error *err);
void free_options(struct options *opts);
void print_usage(FILE *out);

#endif
