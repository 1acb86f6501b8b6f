#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *isolation_name(enum isolation level)
{
    switch (level) {
    case ISOLATION_NAMESPACES:
        return "namespaces";
    case ISOLATION_LANDLOCK:
        return "landlock";
    case ISOLATION_SECCOMP:
        return "seccomp";
    default:
        return "auto";
    }
}

void print_usage(FILE *out)
{
    fputs(
        "usage: dnmopd-sandbox [OPTIONS] -- COMMAND [ARGS...]\n"
        "       dnmopd-sandbox --probe\n"
        "\n"
        "Runs COMMAND isolated and under resource limits, and prints a JSON report on stdout.\n"
        "The program's stdin is this process's stdin; its stdout and stderr are captured into the report.\n"
        "\n"
        "  --isolation=LEVEL   auto (default), namespaces, landlock or seccomp; a forced level that is\n"
        "                      not available is an error\n"
        "  --cpu-time=S        CPU seconds per process (default 10; rounded up to whole seconds)\n"
        "  --wall-time=S       wall-clock seconds for the whole run (default 10)\n"
        "  --memory=BYTES      address space of each process, and resident memory of all processes\n"
        "                      together (sampled; default 1G)\n"
        "  --processes=N       processes and threads the program may have at once (default 16)\n"
        "  --file-size=BYTES   largest file the program may write (default 16M)\n"
        "  --open-files=N      open file descriptors per process (default 64)\n"
        "  --output=BYTES      stdout and stderr kept per stream; more ends the run (default 1M)\n"
        "  --tmp-size=BYTES    size of the private temporary directory, and 1 file per 4K of it (default\n"
        "                      64M; namespaces: a tmpfs; other levels: sampled, the run is killed past it)\n"
        "  --ro=PATH           also expose host PATH read-only (repeatable)\n"
        "  --hide=PATH         mask directory PATH inside the exposed ones: namespaces show it empty,\n"
        "                      Landlock lists its names but reads nothing in it (repeatable; --ro paths\n"
        "                      beneath it stay visible)\n"
        "  --no-default-paths  expose only the --ro paths, not the system directories (/usr, /bin, /lib...)\n"
        "  --file=NAME=SOURCE  copy host file SOURCE into the temporary directory as NAME (repeatable)\n"
        "  --env=KEY=VALUE     add to the program's environment (repeatable)\n"
        "  --probe             print which isolation levels this machine allows, as JSON, and exit\n"
        "BYTES take an optional K, M or G suffix (powers of 1024).\n",
        out);
}

static int parse_seconds(const char *text, const char *option, double *out, struct error *err)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v) || v <= 0 || v > 86400)
        return fail(err, "--%s: expected seconds in (0, 86400], got '%s'", option, text);
    *out = v;
    return 0;
}

static int parse_count(const char *text, const char *option, unsigned long long min,
                       unsigned long long max, unsigned long long *out, struct error *err)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    unsigned long long scale = 1;
    if (*end && !end[1]) {
        switch (*end) {
        case 'K': case 'k': scale = 1ULL << 10; end++; break;
        case 'M': case 'm': scale = 1ULL << 20; end++; break;
        case 'G': case 'g': scale = 1ULL << 30; end++; break;
        default: break;
        }
    }
    if (errno || end == text || *end || text[0] == '-' || v > max / scale || v * scale < min)
        return fail(err, "--%s: expected a number in [%llu, %llu], got '%s'", option, min, max, text);
    *out = v * scale;
    return 0;
}

static int append(const char ***list, size_t *count, const char *value)
{
    const char **grown = realloc(*list, (*count + 1) * sizeof **list);
    if (!grown)
        return -1;
    grown[(*count)++] = value;
    *list = grown;
    return 0;
}

static int add_file(struct options *opts, char *spec, struct error *err)
{
    char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1])
        return fail(err, "--file: expected NAME=SOURCE, got '%s'", spec);
    *eq = '\0';
    if (strchr(spec, '/') || !strcmp(spec, ".") || !strcmp(spec, ".."))
        return fail(err, "--file: NAME must be a plain file name, got '%s'", spec);
    struct file_copy *grown = realloc(opts->files, (opts->file_count + 1) * sizeof *grown);
    if (!grown)
        return fail(err, "out of memory");
    grown[opts->file_count++] = (struct file_copy){.name = spec, .source = eq + 1};
    opts->files = grown;
    return 0;
}

static int parse_isolation(const char *text, enum isolation *out, struct error *err)
{
    static const enum isolation all[] = {ISOLATION_AUTO, ISOLATION_NAMESPACES, ISOLATION_LANDLOCK,
                                         ISOLATION_SECCOMP};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(text, isolation_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return fail(err, "--isolation: expected auto, namespaces, landlock or seccomp, got '%s'", text);
}

bool path_beneath(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/' || (n == 1 && dir[0] == '/'));
}

bool path_hidden(const struct options *o, const char *path)
{
    for (size_t i = 0; i < o->hidden_count; i++)
        if (path_beneath(path, o->hidden_paths[i]))
            return true;
    return false;
}

/* An absolute path, without trailing slashes (stripped in place). */
static int absolute_path(char *arg, const char *option, struct error *err)
{
    if (arg[0] != '/')
        return fail(err, "--%s: expected an absolute path, got '%s'", option, arg);
    for (size_t n = strlen(arg); n > 1 && arg[n - 1] == '/'; n--)
        arg[n - 1] = '\0';
    return 0;
}

/* Paths the sandbox builds itself (or the whole host): exposing them would undo the isolation. */
static bool is_reserved(const char *path)
{
    static const char *const reserved[] = {"/", "/tmp", "/dev", "/proc"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (!strcmp(path, reserved[i]))
            return true;
    return false;
}

enum {
    OPT_ISOLATION = 256, OPT_CPU, OPT_WALL, OPT_MEMORY, OPT_PROCESSES, OPT_FILE_SIZE, OPT_OPEN_FILES,
    OPT_OUTPUT, OPT_TMP, OPT_RO, OPT_HIDE, OPT_NO_DEFAULT_PATHS, OPT_FILE, OPT_ENV, OPT_PROBE, OPT_HELP,
};

static int apply_option(struct options *o, int id, char *arg, struct error *err)
{
    unsigned long long n;
    switch (id) {
    case OPT_ISOLATION: return parse_isolation(arg, &o->isolation, err);
    case OPT_CPU: return parse_seconds(arg, "cpu-time", &o->cpu_time_s, err);
    case OPT_WALL: return parse_seconds(arg, "wall-time", &o->wall_time_s, err);
    case OPT_MEMORY: return parse_count(arg, "memory", 1 << 20, 1ULL << 50, &o->memory_bytes, err);
    case OPT_FILE_SIZE: return parse_count(arg, "file-size", 0, 1ULL << 50, &o->file_size_bytes, err);
    case OPT_OUTPUT: return parse_count(arg, "output", 1, 1ULL << 32, &o->output_bytes, err);
    case OPT_TMP: return parse_count(arg, "tmp-size", 1 << 16, 1ULL << 40, &o->tmp_bytes, err);
    case OPT_PROCESSES:
        if (parse_count(arg, "processes", 1, 1 << 20, &n, err))
            return -1;
        o->processes = (unsigned long)n;
        return 0;
    case OPT_OPEN_FILES:
        if (parse_count(arg, "open-files", 4, 1 << 20, &n, err))
            return -1;
        o->open_files = (unsigned long)n;
        return 0;
    case OPT_RO:
        if (absolute_path(arg, "ro", err))
            return -1;
        if (is_reserved(arg))
            return fail(err, "--ro: '%s' cannot be exposed: /, /tmp, /dev and /proc are the sandbox's own", arg);
        return append(&o->ro_paths, &o->ro_count, arg) ? fail(err, "out of memory") : 0;
    case OPT_HIDE:
        if (absolute_path(arg, "hide", err))
            return -1;
        if (!strcmp(arg, "/"))
            return fail(err, "--hide: '/' cannot be hidden (use --no-default-paths)");
        return append(&o->hidden_paths, &o->hidden_count, arg) ? fail(err, "out of memory") : 0;
    case OPT_NO_DEFAULT_PATHS: o->no_default_paths = true; return 0;
    case OPT_FILE: return add_file(o, arg, err);
    case OPT_ENV:
        if (!strchr(arg, '=') || arg[0] == '=')
            return fail(err, "--env: expected KEY=VALUE, got '%s'", arg);
        return append(&o->env, &o->env_count, arg) ? fail(err, "out of memory") : 0;
    case OPT_PROBE: o->probe = true; return 0;
    default: return fail(err, "unknown option (see --help)");
    }
}

int parse_options(int argc, char **argv, struct options *opts, struct error *err)
{
    static const struct option longopts[] = {
        {"isolation", required_argument, NULL, OPT_ISOLATION},
        {"cpu-time", required_argument, NULL, OPT_CPU},
        {"wall-time", required_argument, NULL, OPT_WALL},
        {"memory", required_argument, NULL, OPT_MEMORY},
        {"processes", required_argument, NULL, OPT_PROCESSES},
        {"file-size", required_argument, NULL, OPT_FILE_SIZE},
        {"open-files", required_argument, NULL, OPT_OPEN_FILES},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"tmp-size", required_argument, NULL, OPT_TMP},
        {"ro", required_argument, NULL, OPT_RO},
        {"hide", required_argument, NULL, OPT_HIDE},
        {"no-default-paths", no_argument, NULL, OPT_NO_DEFAULT_PATHS},
        {"file", required_argument, NULL, OPT_FILE},
        {"env", required_argument, NULL, OPT_ENV},
        {"probe", no_argument, NULL, OPT_PROBE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    *opts = (struct options){
        .isolation = ISOLATION_AUTO, .cpu_time_s = 10, .wall_time_s = 10, .memory_bytes = 1ULL << 30,
        .processes = 16, .file_size_bytes = 16ULL << 20, .open_files = 64, .output_bytes = 1ULL << 20,
        .tmp_bytes = 64ULL << 20,
    };
    opterr = 0;
    int id;
    while ((id = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        if (id == OPT_HELP) {
            print_usage(stdout);
            return 1;
        }
        if (id == '?')
            return fail(err, "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
        if (apply_option(opts, id, optarg, err))
            return -1;
    }
    if (opts->probe)
        return 0;
    if (optind >= argc)
        return fail(err, "no command given (usage: dnmopd-sandbox [OPTIONS] -- COMMAND [ARGS...])");
    opts->command = argv + optind;
    return 0;
}

void free_options(struct options *opts)
{
    free(opts->ro_paths);
    free(opts->hidden_paths);
    free(opts->files);
    free(opts->env);
}
