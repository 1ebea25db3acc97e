"""The syscall filter every sandboxed run gets: a written deny-list policy, close to
Docker's default seccomp profile, compiled with Debian's libseccomp (through ctypes, no
build step) into the classic-BPF program that `bwrap --seccomp FD` and the zygote load.
The policy allows by default and refuses what a Python, Node.js or Julia program never
needs and what reaches the host kernel's shared state or its least-trusted code: keyrings,
io_uring, ptrace, perf, bpf, mounting, namespaces, modules, clocks and the like (table:
`python -m piexp.sandbox.syscall_filter`). Syscalls of any architecture other than the
native one (32-bit `int 0x80` and x32 on x86_64) kill the process.

Why a deny list and not Docker's allow list: the runtimes' needs change with their
versions, and a refused syscall a runtime needs breaks runs silently; the denied set is
the part of Docker's profile that matters for a process without capabilities. The cost
is that syscalls newer than this list are allowed until they are added here.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
from dataclasses import dataclass

# libseccomp's runtime library (Debian: libseccomp2); its -dev headers are not needed.
LIBSECCOMP = "libseccomp.so.2"

# Constants from libseccomp v2.5.4's include/seccomp.h.in (github.com/seccomp/libseccomp,
# tag v2.5.4): "#define SCMP_ACT_ALLOW 0x7fff0000U", "#define SCMP_ACT_KILL_PROCESS
# 0x80000000U", "#define SCMP_ACT_ERRNO(x) (0x00050000U | ((x) & 0x0000ffffU))",
# enum scmp_filter_attr (SCMP_FLTATR_ACT_BADARCH = 2, SCMP_FLTATR_CTL_OPTIMIZE = 8) and
# enum scmp_compare (SCMP_CMP_MASKED_EQ = 7).
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_FLTATR_CTL_OPTIMIZE = 8
SCMP_CMP_MASKED_EQ = 7


def SCMP_ACT_ERRNO(code: int) -> int:  # noqa: N802 - the C macro's name
    return 0x00050000 | (code & 0x0000FFFF)


class ScmpArgCmp(ctypes.Structure):
    """struct scmp_arg_cmp (seccomp.h.in v2.5.4): unsigned int arg; enum scmp_compare op;
    scmp_datum_t (uint64_t) datum_a, datum_b. For MASKED_EQ datum_a is the mask."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class SyscallFilterError(RuntimeError):
    """The filter cannot be built here (libseccomp missing or refusing a rule)."""


@dataclass(frozen=True)
class ArgMatch:
    """Holds when (syscall argument `index` & `mask`) == `value`. Masks stay within the low
    32 bits for int arguments, which is all the kernel reads of them: setting high bits
    cannot slip past (Docker's `socket` rule compares all 64 bits)."""

    index: int  # argument number, from 0
    mask: int  # bits of the argument compared
    value: int  # what those bits must be


@dataclass(frozen=True)
class Rule:
    """One refused syscall, or with `when`, refused only for those argument values."""

    syscall: str  # the name as libseccomp knows it
    errno: int  # what the call returns instead of running
    reason: str  # why a run must not have it
    when: tuple[ArgMatch, ...] = ()  # all must hold; () = every call


def _deny(names: str, reason: str, code: int = errno.EPERM) -> list[Rule]:
    return [Rule(name, code, reason) for name in names.split()]


# Linux's CLONE_NEW* flags (include/uapi/linux/sched.h). CLONE_NEWTIME (0x80) is left out:
# clone(2) reads those bits as the exit signal; only clone3/unshare can ask for it, and
# both are refused whole.
CLONE_NEW_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

# personality(2) flags that change a process's memory layout or protections
# (include/uapi/linux/personality.h); 0xffffffff only queries the current persona.
PERSONALITY_FLAGS = {
    "ADDR_NO_RANDOMIZE": 0x0040000,
    "MMAP_PAGE_ZERO": 0x0100000,
    "ADDR_COMPAT_LAYOUT": 0x0200000,
    "READ_IMPLIES_EXEC": 0x0400000,
    "ADDR_LIMIT_32BIT": 0x0800000,
    "ADDR_LIMIT_3GB": 0x8000000,
}
AF_VSOCK = 40


def _personality_rules() -> list[Rule]:
    """Docker allows only personas 0, PER_LINUX32, UNAME26 (and their union) and the query.
    Decision: refuse every value that sets a layout/protection flag above (ASLR off,
    executable data, page zero), allow the execution domains (no-ops on current kernels)
    and the query. One masked-equality compare per rule and argument (libseccomp's limit)
    cannot say "not 0xffffffff", so: flag set with bit 31 clear; and bit 31 set with some
    other bit clear (every value with bit 31 set but the query: no persona uses bit 31)."""
    top = 1 << 31
    rules = [
        Rule("personality", errno.EPERM, f"{name}: changes memory layout/protection", (ArgMatch(0, flag | top, flag),))
        for name, flag in PERSONALITY_FLAGS.items()
    ]
    rules += [
        Rule(
            "personality",
            errno.EPERM,
            "bit 31 set: not a persona, only the query 0xffffffff may set it",
            (ArgMatch(0, top | 1 << bit, top),),
        )
        for bit in range(31)
    ]
    return rules


# The policy. Docker's default profile (moby profiles/seccomp/default.json) refuses these
# to a container without the matching capability, which a run never has (io_uring only in
# newer releases; get_mempolicy, which Docker gates too, stays allowed here for hwloc).
POLICY: tuple[Rule, ...] = tuple(
    _deny(
        "add_key keyctl request_key",
        "kernel keyrings are not namespaced: keys outlive the run and share host root's quota",
    )
    + _deny(
        "io_uring_setup io_uring_enter io_uring_register",
        "a large, often-exploited kernel surface (newer Docker profiles drop it); libuv falls back",
    )
    + _deny(
        "ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd process_madvise",
        "reaches into another process (a run could stop its own sandbox init)",
    )
    + _deny("perf_event_open", "performance counters: kernel attack surface and side channels")
    + _deny("bpf", "loads programs into the kernel")
    + _deny("userfaultfd", "lets a run stall kernel copies at will (a standard exploit aid)")
    + _deny("mount umount umount2 pivot_root chroot", "the run's file system layout is fixed by the launcher")
    + _deny("fsopen fsconfig fsmount fspick move_mount open_tree mount_setattr", "the new mount API: the same as mount")
    + _deny("unshare setns", "new or other namespaces: fresh user namespaces reopen everything capability-gated")
    + _deny("init_module finit_module delete_module create_module get_kernel_syms query_module", "kernel modules")
    + _deny("kexec_load kexec_file_load reboot", "replaces or stops the kernel")
    + _deny("swapon swapoff acct quotactl quotactl_fd", "host-wide storage and accounting settings")
    + _deny(
        "settimeofday stime clock_settime",
        "sets the host clock (adjtimex/clock_adjtime stay allowed, as in Docker: read-only use is common and setting needs CAP_SYS_TIME)",
    )
    + _deny("syslog", "the kernel log: host information")
    + _deny(
        "lookup_dcookie name_to_handle_at open_by_handle_at",
        "file handles bypass path lookup (open_by_handle_at was a container escape)",
    )
    + _deny("iopl ioperm", "raw I/O port access")
    + _deny("uselib ustat sysfs _sysctl vm86 vm86old nfsservctl", "obsolete interfaces nothing current uses")
    + _deny("sethostname setdomainname vhangup", "host identity and terminal control")
    + _deny(
        "mbind set_mempolicy set_mempolicy_home_node move_pages migrate_pages",
        "NUMA placement of memory (Docker gates it behind CAP_SYS_NICE); get_mempolicy stays allowed for hwloc",
    )
    + _deny("fanotify_init", "watches the file systems of other mount namespaces")
    + [
        Rule("clone", errno.EPERM, f"{name}: no new namespaces", (ArgMatch(0, flag, flag),))
        for name, flag in CLONE_NEW_FLAGS.items()
    ]
    + _deny(
        "clone3",
        "its flags live in memory a filter cannot read; ENOSYS makes glibc fall back to clone (as Docker does)",
        errno.ENOSYS,
    )
    + _personality_rules()
    + [
        Rule(
            "socket",
            errno.EPERM,
            "AF_VSOCK: talks to the hypervisor, outside every network namespace",
            (ArgMatch(0, 0xFFFFFFFF, AF_VSOCK),),
        )
    ]
)


def _load_library(library: str) -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(library, use_errno=True)
    except OSError as exc:
        raise SyscallFilterError(
            f"The sandbox's syscall filter needs libseccomp, which could not be loaded ({library}: {exc}). "
            "Install it (Debian/Ubuntu: apt-get install libseccomp2)."
        ) from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ScmpArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _check(rc: int, what: str) -> None:
    if rc < 0:
        raise SyscallFilterError(f"libseccomp refused {what}: {os.strerror(-rc)}")


def syscall_number(name: str, library: str = LIBSECCOMP) -> int:
    """The native number of syscall `name`, negative when libseccomp does not know it on
    this architecture (such rules are skipped)."""
    return _load_library(library).seccomp_syscall_resolve_name(name.encode())


@functools.lru_cache(maxsize=None)
def filter_bpf(library: str = LIBSECCOMP) -> bytes:
    """POLICY compiled to a classic-BPF program for this architecture (struct sock_filter
    records, 8 bytes each), built once per process. `library`: the libseccomp to load."""
    lib = _load_library(library)
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SyscallFilterError("libseccomp's seccomp_init failed")
    try:
        # Other architectures (x86_64: 32-bit int 0x80, and x32, whose numbers libseccomp
        # sends to this action: src/gen_bpf.c "filter out x32") kill the whole process;
        # libseccomp's default kills only the calling thread, leaving a half-dead process.
        _check(lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "the bad-architecture action")
        # A binary tree over syscall numbers: every allowed call costs O(log n) checks.
        _check(lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2), "binary-tree optimization")
        for rule in POLICY:
            number = lib.seccomp_syscall_resolve_name(rule.syscall.encode())
            if number < 0:
                continue
            args = (ScmpArgCmp * max(1, len(rule.when)))(
                *[ScmpArgCmp(m.index, SCMP_CMP_MASKED_EQ, m.mask, m.value) for m in rule.when]
            )
            _check(
                lib.seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(rule.errno), number, len(rule.when), args),
                f"the rule for {rule.syscall}",
            )
        memfd = os.memfd_create("piexp-seccomp-export", os.MFD_CLOEXEC)
        try:
            _check(lib.seccomp_export_bpf(ctx, memfd), "exporting the filter")
            size = os.lseek(memfd, 0, os.SEEK_END)
            return os.pread(memfd, size, 0)
        finally:
            os.close(memfd)
    finally:
        lib.seccomp_release(ctx)


def filter_fd(library: str = LIBSECCOMP) -> int:
    """A new read-only, close-on-exec fd at offset 0 holding `filter_bpf()`, for
    `bwrap --seccomp FD` (pass it with pass_fds); the caller closes it."""
    program = filter_bpf(library)
    memfd = os.memfd_create("piexp-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.write(memfd, program)
        fcntl.fcntl(
            memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
        )
        # A fresh open file description: read-only, at offset 0.
        return os.open(f"/proc/self/fd/{memfd}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(memfd)


def policy_table(library: str = LIBSECCOMP) -> list[tuple[str, str, str]]:
    """(syscall, action, reason) per rule, consecutive rules of one syscall and reason on
    one row; rules libseccomp cannot resolve on this architecture say so."""
    lib = _load_library(library)
    rows: list[tuple[str, str, str]] = []
    merged = 0
    for rule in POLICY:
        action = errno.errorcode[rule.errno]
        if rule.when:
            action += " if " + " and ".join(f"arg{m.index} & {m.mask:#x} == {m.value:#x}" for m in rule.when)
        if lib.seccomp_syscall_resolve_name(rule.syscall.encode()) < 0:
            action = "(not on this architecture)"
        if rows and rows[-1][0] == rule.syscall and rows[-1][2] == rule.reason:
            merged += 1
            rows[-1] = (rule.syscall, rows[-1][1].split(" (+")[0] + f" (+{merged} more like it)", rule.reason)
            continue
        merged = 0
        rows.append((rule.syscall, action, rule.reason))
    return rows


if __name__ == "__main__":
    for syscall, action, reason in policy_table():
        print(f"{syscall:24} {action:56} {reason}")
    print(
        f"\nBPF program: {len(filter_bpf()) // 8} instructions; every other syscall is allowed; "
        "other architectures' syscalls kill the process."
    )
