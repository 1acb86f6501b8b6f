#include "seccomp.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define SANDBOX_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SANDBOX_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#define MAX_INSNS 512
#define RET(action) BPF_STMT(BPF_RET | BPF_K, (action))
#define ERRNO(e) (SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))
#define LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, field))
/* The low 32 bits of a syscall argument (both supported architectures are little-endian). */
#define LOAD_ARG(i) LOAD(args[i])

static const int denied_syscalls[] = {
    __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_pidfd_getfd, __NR_process_madvise,
    __NR_mount, __NR_umount2, __NR_pivot_root, __NR_chroot, __NR_unshare, __NR_setns,
    __NR_fsopen, __NR_fsconfig, __NR_fsmount, __NR_move_mount, __NR_open_tree, __NR_fspick,
    __NR_mount_setattr, __NR_init_module, __NR_finit_module, __NR_delete_module, __NR_kexec_load,
    __NR_kexec_file_load, __NR_reboot, __NR_swapon, __NR_swapoff, __NR_acct, __NR_quotactl,
    __NR_quotactl_fd, __NR_syslog, __NR_settimeofday, __NR_clock_settime, __NR_clock_adjtime,
    __NR_adjtimex, __NR_sethostname, __NR_setdomainname, __NR_keyctl, __NR_add_key, __NR_request_key,
    __NR_bpf, __NR_perf_event_open, __NR_userfaultfd, __NR_io_uring_setup, __NR_io_uring_enter,
    __NR_io_uring_register, __NR_open_by_handle_at, __NR_name_to_handle_at, __NR_fanotify_init,
    __NR_vhangup, __NR_lookup_dcookie,
    /* memory that no process's resident set shows (so the memory limit would not count it), and SysV
     * and POSIX message queues, which outlive the run where there is no IPC namespace */
    __NR_memfd_create, __NR_shmget, __NR_shmat, __NR_shmdt, __NR_shmctl, __NR_semget, __NR_semop,
    __NR_semtimedop, __NR_semctl, __NR_msgget, __NR_msgsnd, __NR_msgrcv, __NR_msgctl, __NR_mq_open,
    __NR_mq_unlink, __NR_mq_timedsend, __NR_mq_timedreceive, __NR_mq_notify, __NR_mq_getsetattr,
#ifdef __NR_memfd_secret
    __NR_memfd_secret,
#endif
#ifdef __NR_iopl
    __NR_iopl,
#endif
#ifdef __NR_ioperm
    __NR_ioperm,
#endif
#ifdef __NR_modify_ldt
    __NR_modify_ldt,
#endif
#ifdef __NR_uselib
    __NR_uselib,
#endif
#ifdef __NR_nfsservctl
    __NR_nfsservctl,
#endif
};

struct program {
    struct sock_filter insns[MAX_INSNS];
    unsigned short len;
    bool overflow;
};

static void emit(struct program *p, struct sock_filter insn)
{
    if (p->len >= MAX_INSNS) {
        p->overflow = true;
        return;
    }
    p->insns[p->len++] = insn;
}

/* if (nr == syscall) return action; — expects the syscall number in the accumulator. */
static void on_syscall(struct program *p, int nr, uint32_t action)
{
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1));
    emit(p, (struct sock_filter)RET(action));
}

/*
 * if (nr == syscall) return (arg[i] is one of values) ? on_match : otherwise;
 * Every path inside the block returns, so the accumulator still holds nr for the next block.
 */
static void on_syscall_arg(struct program *p, int nr, int arg, const uint32_t *values, unsigned char n,
                           uint32_t on_match, uint32_t otherwise)
{
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, (unsigned char)(n + 3)));
    emit(p, (struct sock_filter)LOAD_ARG(arg));
    for (unsigned char j = 0; j < n; j++)
        emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, values[j], (unsigned char)(n - j), 0));
    emit(p, (struct sock_filter)RET(otherwise));
    emit(p, (struct sock_filter)RET(on_match));
}

/* if (nr == syscall) return (arg[i] & mask) ? on_match : SECCOMP_RET_ALLOW; */
static void on_syscall_flags(struct program *p, int nr, int arg, uint32_t mask, uint32_t on_match)
{
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 4));
    emit(p, (struct sock_filter)LOAD_ARG(arg));
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1));
    emit(p, (struct sock_filter)RET(on_match));
    emit(p, (struct sock_filter)RET(SECCOMP_RET_ALLOW));
}

static void restrict_signals(struct program *p, pid_t own_pid)
{
    const uint32_t kill_targets[] = {0, (uint32_t)own_pid, (uint32_t)-own_pid};
    const uint32_t own[] = {(uint32_t)own_pid};
    on_syscall_arg(p, __NR_kill, 0, kill_targets, 3, SECCOMP_RET_ALLOW, ERRNO(EPERM));
    on_syscall_arg(p, __NR_tkill, 0, own, 1, SECCOMP_RET_ALLOW, ERRNO(EPERM));
    on_syscall_arg(p, __NR_tgkill, 0, own, 1, SECCOMP_RET_ALLOW, ERRNO(EPERM));
    on_syscall_arg(p, __NR_rt_sigqueueinfo, 0, own, 1, SECCOMP_RET_ALLOW, ERRNO(EPERM));
    on_syscall_arg(p, __NR_rt_tgsigqueueinfo, 0, own, 1, SECCOMP_RET_ALLOW, ERRNO(EPERM));
    on_syscall(p, __NR_pidfd_send_signal, ERRNO(EPERM));
}

static void build(struct program *p, bool own_group_signals, pid_t own_pid)
{
    const uint32_t unix_only[] = {AF_UNIX};
    const uint32_t tty_injection[] = {TIOCSTI, TIOCLINUX};
    const uint32_t self_only[] = {0};
    const uint32_t dumpable[] = {PR_SET_DUMPABLE};
    const uint32_t new_namespaces = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                    CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;

    emit(p, (struct sock_filter)LOAD(arch));
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SANDBOX_AUDIT_ARCH, 1, 0));
    emit(p, (struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS));
    emit(p, (struct sock_filter)LOAD(nr));
#if defined(__x86_64__)
    emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1)); /* x32 ABI */
    emit(p, (struct sock_filter)RET(SECCOMP_RET_KILL_PROCESS));
#endif
    for (size_t i = 0; i < sizeof denied_syscalls / sizeof denied_syscalls[0]; i++)
        on_syscall(p, denied_syscalls[i], ERRNO(EPERM));
    on_syscall(p, __NR_clone3, ERRNO(ENOSYS));
    on_syscall_flags(p, __NR_clone, 0, new_namespaces, ERRNO(EPERM));
    /* No socket of any family: a unix socket could reach the host's (Landlock does not cover pathname
     * sockets). A connected pair of unix sockets reaches nothing else. */
    on_syscall(p, __NR_socket, ERRNO(EACCES));
    on_syscall_arg(p, __NR_socketpair, 0, unix_only, 1, SECCOMP_RET_ALLOW, ERRNO(EACCES));
    /* Undumpable, a process's /proc files are closed to an unprivileged supervisor (which reads them). */
    on_syscall_arg(p, __NR_prctl, 0, dumpable, 1, ERRNO(EPERM), SECCOMP_RET_ALLOW);
    on_syscall_arg(p, __NR_ioctl, 1, tty_injection, 2, ERRNO(EPERM), SECCOMP_RET_ALLOW);
    on_syscall_arg(p, __NR_prlimit64, 0, self_only, 1, SECCOMP_RET_ALLOW, ERRNO(EPERM));
    if (own_group_signals)
        restrict_signals(p, own_pid);
    emit(p, (struct sock_filter)RET(SECCOMP_RET_ALLOW));
}

int install_seccomp(bool own_group_signals, pid_t own_pid, struct error *err)
{
#ifndef SANDBOX_AUDIT_ARCH
    (void)own_group_signals;
    (void)own_pid;
    return fail(err, "seccomp filter: this architecture is not supported (x86_64 and aarch64 are)");
#else
    static struct program p; /* static: too large for the small stacks some callers use */
    p.len = 0;
    p.overflow = false;
    build(&p, own_group_signals, own_pid);
    if (p.overflow)
        return fail(err, "seccomp filter: more than %d instructions", MAX_INSNS);
    struct sock_fprog prog = {.len = p.len, .filter = p.insns};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        return fail_errno(err, "prctl(PR_SET_NO_NEW_PRIVS)");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0))
        return fail_errno(err, "installing the seccomp filter");
    return 0;
#endif
}
