/* Reads the sandbox's report: one flat JSON object of strings, numbers, booleans and nulls. A field
 * "NAME_base64" is stored decoded as "NAME" (a program's output with a NUL in it reads as cut there). */
#ifndef DNMOPD_SANDBOX_TEST_REPORT_JSON_H
#define DNMOPD_SANDBOX_TEST_REPORT_JSON_H

#include <stdbool.h>

#define REPORT_MAX_FIELDS 48

struct report_field {
    char key[64];
    char *value; /* decoded string, or the literal text of a number/true/false; NULL for null */
};

struct report {
    struct report_field fields[REPORT_MAX_FIELDS];
    int count;
};

/* Returns 0, or -1 when text is not such an object. */
int report_parse(const char *text, struct report *out);
void report_free(struct report *r);
/* The field's value (NULL for a JSON null); missing keys abort the test with a message. */
const char *report_get(const struct report *r, const char *key);
double report_number(const struct report *r, const char *key);

#endif
