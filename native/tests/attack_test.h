/* The ctest attack driver's shared parts: the run context, running the sandbox, checks. */
#ifndef DNMOPD_SANDBOX_TEST_ATTACK_TEST_H
#define DNMOPD_SANDBOX_TEST_ATTACK_TEST_H

#include <stdbool.h>

#include "report_json.h"

#define PROCESS_LIMIT 16 /* --processes of every run */

struct context {
    const char *sandbox, *attack, *level; /* level as given, e.g. "landlock-unprivileged" */
    char isolation[32];                   /* the sandbox's level: "landlock" */
    char attack_dir[4096], scratch[64], token[33], secret[33];
    bool privileged;
    int failures;
};

/* Records a failure (with a message) unless ok. */
void expect(struct context *c, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool equals(const char *value, const char *want);
int count_lines(const char *text, const char *prefix);
/* Runs `attack NAME TOKEN args...` in the sandbox with the default limits plus options; fills report
 * (exits the test on an unreadable report) unless report is NULL; returns the sandbox's exit status. */
int run_sandbox(struct context *c, const char *const *options, const char *name, const char *const *args,
                const char *stdin_data, struct report *report);

struct attack_case {
    const char *name;
    void (*run)(struct context *);
    bool needs_uid_change; /* contained only where the program runs as another uid than the caller */
};
extern const struct attack_case attack_cases[];
extern const unsigned attack_case_count;

#endif
