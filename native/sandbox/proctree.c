#include "proctree.h"

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

struct process_table {
    pid_t *pid, *ppid;
    long *rss_pages;
    size_t n, cap;
};

void for_each_process(const char *file, void (*visit)(pid_t, const char *, void *), void *arg)
{
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    char path[64], text[2048];
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/%ld/%s", pid, file);
        if (read_small_file(path, text, sizeof text) > 0)
            visit((pid_t)pid, text, arg);
    }
    closedir(d);
}

static bool grow(struct process_table *t)
{
    size_t cap = t->cap ? 2 * t->cap : 256;
    pid_t *pid = realloc(t->pid, cap * sizeof *pid);
    if (pid)
        t->pid = pid;
    pid_t *ppid = pid ? realloc(t->ppid, cap * sizeof *ppid) : NULL;
    if (ppid)
        t->ppid = ppid;
    long *rss = ppid ? realloc(t->rss_pages, cap * sizeof *rss) : NULL;
    if (!rss)
        return false;
    t->rss_pages = rss;
    t->cap = cap;
    return true;
}

static void collect(pid_t pid, const char *stat, void *arg)
{
    struct process_table *t = arg;
    const char *after_name = strrchr(stat, ')'); /* the name may hold spaces and parentheses */
    int ppid;
    long rss;
    /* fields 3 (state), 4 (ppid), ..., 24 (rss, in pages) of proc(5) */
    if (!after_name || sscanf(after_name + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                                              "%*d %*d %*d %*d %*u %*u %ld", &ppid, &rss) != 2)
        return;
    if (t->n == t->cap && !grow(t))
        return;
    t->pid[t->n] = pid;
    t->ppid[t->n] = (pid_t)ppid;
    t->rss_pages[t->n++] = rss;
}

/* Marks root's descendants in t; returns the marks (NULL when out of memory). */
static char *mark_descendants(const struct process_table *t, pid_t root)
{
    char *mine = calloc(t->n ? t->n : 1, 1);
    for (bool grew = true; grew && mine;) {
        grew = false;
        for (size_t i = 0; i < t->n; i++) {
            if (mine[i])
                continue;
            bool child = t->ppid[i] == root;
            for (size_t j = 0; !child && j < t->n; j++)
                child = mine[j] && t->pid[j] == t->ppid[i];
            if (child)
                mine[i] = grew = true;
        }
    }
    return mine;
}

static void free_table(struct process_table *t)
{
    free(t->pid);
    free(t->ppid);
    free(t->rss_pages);
}

size_t kill_descendants(pid_t root)
{
    struct process_table t = {0};
    for_each_process("stat", collect, &t);
    char *mine = mark_descendants(&t, root);
    size_t found = 0;
    for (size_t i = 0; mine && i < t.n; i++)
        if (mine[i] && kill(t.pid[i], SIGKILL) == 0)
            found++;
    free(mine);
    free_table(&t);
    return found;
}

/* Blocks of the regular files pid holds open that have no name left (unlinked while open, O_TMPFILE). */
static long long deleted_file_bytes(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    long long bytes = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char fd_path[320];
        struct stat st;
        snprintf(fd_path, sizeof fd_path, "%s/%s", path, e->d_name);
        if (e->d_name[0] != '.' && stat(fd_path, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 0)
            bytes += (long long)st.st_blocks * 512;
    }
    if (d)
        closedir(d);
    return bytes;
}

void descendants_usage(pid_t root, bool count_files, struct tree_usage *usage)
{
    struct process_table t = {0};
    for_each_process("stat", collect, &t);
    char *mine = mark_descendants(&t, root);
    *usage = (struct tree_usage){0};
    for (size_t i = 0; mine && i < t.n; i++)
        if (mine[i]) {
            usage->rss_bytes += t.rss_pages[i] * sysconf(_SC_PAGESIZE);
            if (count_files)
                usage->deleted_file_bytes += deleted_file_bytes(t.pid[i]);
        }
    free(mine);
    free_table(&t);
}
