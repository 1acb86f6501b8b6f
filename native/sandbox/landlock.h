/* Landlock rules for the levels without a private mount namespace. */
#ifndef DNMOPD_SANDBOX_LANDLOCK_H
#define DNMOPD_SANDBOX_LANDLOCK_H

#include <stddef.h>

#include "options.h"
#include "util.h"

/* The kernel's Landlock ABI version, or 0 where Landlock is unavailable or disabled. */
int landlock_abi(void);

/*
 * Restricts the calling process (and its descendants) to: read and execute beneath the default paths
 * (unless no_default_paths; missing ones are skipped) and the --ro paths (which must exist), except
 * inside the hidden directories (their names can be listed, nothing in them read, but --ro paths
 * beneath them are readable); everything beneath write_dir; read/write on a few /dev files; no TCP
 * bind/connect (ABI >= 4); no signals to and no abstract unix sockets of processes outside the
 * sandbox (ABI >= 6). Needs no_new_privs.
 */
int apply_landlock(const struct options *o, const char *write_dir, struct error *err);

#endif
