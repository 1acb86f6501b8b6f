#include "report_json.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_space(const char *p)
{
    while (isspace((unsigned char)*p))
        p++;
    return p;
}

static void put_utf8(char **out, unsigned cp)
{
    char *o = *out;
    if (cp < 0x80)
        *o++ = (char)cp;
    else if (cp < 0x800)
        *o++ = (char)(0xc0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3f));
    else
        *o++ = (char)(0xe0 | cp >> 12), *o++ = (char)(0x80 | ((cp >> 6) & 0x3f)), *o++ = (char)(0x80 | (cp & 0x3f));
    *out = o;
}

/* Parses a string starting at the opening quote; returns the position after it, or NULL. */
static const char *parse_string(const char *p, char **value)
{
    char *out = malloc(strlen(p) + 1), *o = out;
    for (p++; *p && *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            break;
        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        const char *escapes = "\"\"\\\\//b\bf\fn\nr\rt\t";
        const char *e = *++p ? strchr(escapes, *p) : NULL;
        unsigned cp;
        if (*p == 'u' && sscanf(p + 1, "%4x", &cp) == 1 && isxdigit((unsigned char)p[4])) {
            put_utf8(&o, cp);
            p += 4;
        } else if (e && (e - escapes) % 2 == 0)
            *o++ = e[1];
        else
            break;
    }
    if (*p != '"') {
        free(out);
        return NULL;
    }
    *o = '\0';
    *value = out;
    return p + 1;
}

static const char *parse_literal(const char *p, char **value)
{
    size_t n = strcspn(p, ",} \t\r\n");
    if (n == 0)
        return NULL;
    *value = n == 4 && !strncmp(p, "null", 4) ? NULL : strndup(p, n);
    return p + n;
}

/* Decodes base64 in place (it only shrinks); returns -1 on a character outside the alphabet. */
static int decode_base64(char *text)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned bits = 0, nbits = 0;
    char *o = text;
    for (const char *p = text; *p && *p != '='; p++) {
        const char *d = strchr(digits, *p);
        if (!d)
            return -1;
        bits = bits << 6 | (unsigned)(d - digits);
        if ((nbits += 6) >= 8) {
            nbits -= 8;
            *o++ = (char)(bits >> nbits);
            bits &= (1u << nbits) - 1;
        }
    }
    *o = '\0';
    return 0;
}

int report_parse(const char *text, struct report *out)
{
    memset(out, 0, sizeof *out);
    const char *p = skip_space(text);
    if (*p++ != '{')
        return -1;
    for (p = skip_space(p); *p != '}'; p = skip_space(p)) {
        char *key = NULL;
        struct report_field *f = &out->fields[out->count];
        if (out->count == REPORT_MAX_FIELDS || *p != '"' || !(p = parse_string(p, &key)))
            return -1;
        size_t n = strlen(key);
        bool base64 = n > 7 && !strcmp(key + n - 7, "_base64"); /* stored decoded, under the plain name */
        snprintf(f->key, sizeof f->key, "%.*s", (int)(base64 ? n - 7 : n), key);
        free(key);
        p = skip_space(p);
        if (*p++ != ':')
            return -1;
        p = skip_space(p);
        p = *p == '"' ? parse_string(p, &f->value) : parse_literal(p, &f->value);
        if (!p || (base64 && f->value && decode_base64(f->value)))
            return -1;
        out->count++;
        p = skip_space(p);
        if (*p == ',')
            p++;
        else if (*p != '}')
            return -1;
    }
    return 0;
}

void report_free(struct report *r)
{
    for (int i = 0; i < r->count; i++)
        free(r->fields[i].value);
    r->count = 0;
}

const char *report_get(const struct report *r, const char *key)
{
    for (int i = 0; i < r->count; i++)
        if (!strcmp(r->fields[i].key, key))
            return r->fields[i].value;
    fprintf(stderr, "FAIL: the report has no field '%s'\n", key);
    exit(1);
}

double report_number(const struct report *r, const char *key)
{
    const char *v = report_get(r, key);
    return v ? strtod(v, NULL) : -1;
}
