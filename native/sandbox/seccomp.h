/* The seccomp filter every sandboxed program runs under. */
#ifndef DNMOPD_SANDBOX_SECCOMP_H
#define DNMOPD_SANDBOX_SECCOMP_H

#include <stdbool.h>
#include <sys/types.h>

#include "util.h"

/*
 * Installs the filter on the calling process (and so on everything it execs and forks), with
 * no_new_privs set. It refuses, with EPERM unless noted:
 *   - another architecture's or the x32 syscall ABI (the process is killed);
 *   - tracing and cross-process memory access (ptrace, process_vm_*, pidfd_getfd, process_madvise);
 *   - mounts, namespaces (unshare, setns, clone with CLONE_NEW*; clone3 answers ENOSYS so that libc
 *     falls back to clone), chroot and pivot_root;
 *   - kernel-wide operations (modules, kexec, reboot, swap, clocks, hostname, accounting, quotas,
 *     syslog, keyrings, bpf, perf events, userfaultfd, io_uring, file handles, fanotify);
 *   - socket() of every family, socketpair() except AF_UNIX (EACCES);
 *   - memfd_create, SysV shared memory, semaphores and message queues, POSIX message queues;
 *   - terminal injection ioctls (TIOCSTI, TIOCLINUX); prlimit on another process;
 *   - prctl(PR_SET_DUMPABLE) (the supervisor reads the program's /proc files).
 * With own_group_signals, signals may only go to the program's own process group or its first process
 * (`own_pid`): used where no pid namespace hides the caller's processes.
 */
int install_seccomp(bool own_group_signals, pid_t own_pid, struct error *err);

#endif
