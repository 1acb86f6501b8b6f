/* The JSON report on stdout. */
#ifndef DNMOPD_SANDBOX_REPORT_H
#define DNMOPD_SANDBOX_REPORT_H

#include <stdio.h>

#include "run.h"

#define REPORT_VERSION 2

/* stdout and stderr go in base64 ("stdout_base64"): the program's bytes exactly, whatever they are. */
void print_report(FILE *f, const struct run_result *r, const struct options *o);
/* {"version": 1, "error": message}: the program could not be run at all. */
void print_error(FILE *f, const char *message);
/* A JSON string (null for NULL); invalid UTF-8 becomes U+FFFD. */
void put_json_text(FILE *f, const char *value);

#endif
