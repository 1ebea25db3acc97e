"""Syscall probes run inside a sandbox by test_syscall_filter.py (copied into the run
directory, run by the sandbox's python3): `python3 seccomp_probes.py NAME...` prints one
JSON object, NAME -> "ok" or the errno's name, or "signal:SIGSYS" when the probe's process
was killed. Each probe runs in its own forked child, so namespaces it enters, a tracer it
gets or a kill stay there. Syscall numbers are x86_64's."""

import ctypes
import json
import mmap
import os
import signal
import socket
import struct
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SIGCHLD = 17
# include/uapi/linux/sched.h (os.CLONE_* only exist from Python 3.12)
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000


def sys_call(number, *args):
    """syscall(2); returns its result, raising OSError with its errno on -1."""
    ctypes.set_errno(0)
    result = libc.syscall(
        ctypes.c_long(number),
        *[a if isinstance(a, (bytes, ctypes.Array, type(None))) else ctypes.c_long(a) for a in args],
    )
    if result == -1:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def fork_like(result):
    """After a raw clone/clone3: the child leaves at once, the parent reaps it."""
    if result == 0:
        os._exit(0)
    os.waitpid(result, 0)


def keyctl():
    sys_call(250, 0, -3, 1)  # KEYCTL_GET_KEYRING_ID of the session keyring, create


def add_key():
    sys_call(248, b"user", b"piexp-probe", b"x", 1, -2)  # into the process keyring


def io_uring_setup():
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    os.close(sys_call(425, 4, params))


def ptrace_traceme():
    sys_call(101, 0, 0, 0, 0)  # PTRACE_TRACEME


def ptrace_attach():
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    try:
        sys_call(101, 16, child, 0, 0)  # PTRACE_ATTACH
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def process_vm_readv():
    source = ctypes.create_string_buffer(b"piexp", 8)
    target = ctypes.create_string_buffer(8)
    local = struct.pack("QQ", ctypes.addressof(target), 8)
    remote = struct.pack("QQ", ctypes.addressof(source), 8)
    sys_call(310, os.getpid(), local, 1, remote, 1, 0)


def perf_event_open():
    attr = bytearray(128)  # struct perf_event_attr
    struct.pack_into("IIQ", attr, 0, 1, 128, 1)  # PERF_TYPE_SOFTWARE, size, TASK_CLOCK
    struct.pack_into("Q", attr, 40, 0x60)  # exclude_kernel | exclude_hv
    os.close(sys_call(298, ctypes.create_string_buffer(bytes(attr)), 0, -1, -1, 0))


def bpf():
    """An unknown bpf command: the kernel answers EINVAL when the call reaches it (a real
    map or program is refused anyway where kernel.unprivileged_bpf_disabled is set)."""
    sys_call(321, 0xFFFF, ctypes.create_string_buffer(128), 128)


def userfaultfd():
    os.close(sys_call(323, os.O_CLOEXEC | 1))  # UFFD_USER_MODE_ONLY


def unshare_user():
    sys_call(272, CLONE_NEWUSER)


def _clone(flag):
    return lambda: fork_like(sys_call(56, flag | SIGCHLD, 0, 0, 0, 0))


def clone3():
    args = ctypes.create_string_buffer(struct.pack("QQQQQQQQ", 0, 0, 0, 0, SIGCHLD, 0, 0, 0))
    fork_like(sys_call(435, args, 64))


def mount():
    libc_mount = libc.mount
    if libc_mount(b"none", b"/tmp", b"tmpfs", 0, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def fsopen():
    os.close(sys_call(430, b"tmpfs", 0))


def setns():
    fd = os.open("/proc/self/ns/uts", os.O_RDONLY)
    try:
        sys_call(308, fd, 0)
    finally:
        os.close(fd)


def _personality(value):
    def probe():
        old = sys_call(135, value)
        sys_call(135, old)

    return probe


def socket_vsock():
    socket.socket(40, socket.SOCK_STREAM).close()


def x32_getpid():
    sys_call(0x40000000 | 39)


def int80_getpid():
    """getpid through the 32-bit entry (int 0x80) from this 64-bit process."""
    code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3")  # mov eax, 20; int 0x80; ret
    function = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(code)))
    if function() != os.getpid():
        raise OSError(0, "int 0x80 getpid returned a wrong pid")


PROBES = {
    "keyctl": keyctl,
    "add_key": add_key,
    "io_uring_setup": io_uring_setup,
    "ptrace_traceme": ptrace_traceme,
    "ptrace_attach": ptrace_attach,
    "process_vm_readv": process_vm_readv,
    "perf_event_open": perf_event_open,
    "bpf": bpf,
    "userfaultfd": userfaultfd,
    "unshare_user": unshare_user,
    "clone_newuser": _clone(CLONE_NEWUSER),
    "clone_newns": _clone(CLONE_NEWNS),
    "clone_newpid": _clone(CLONE_NEWPID),
    "clone_newnet": _clone(CLONE_NEWNET),
    "clone_plain": _clone(0),
    "clone3": clone3,
    "mount": mount,
    "fsopen": fsopen,
    "setns": setns,
    "personality_no_randomize": _personality(0x0040000),
    "personality_bit31_no_randomize": _personality(0x80040000),
    "personality_query": _personality(0xFFFFFFFF),
    "personality_linux32": _personality(0x0008),
    "socket_vsock": socket_vsock,
    "x32_getpid": x32_getpid,
    "int80_getpid": int80_getpid,
}


def run_in_child(probe):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            probe()
            outcome = "ok"
        except OSError as exc:
            outcome = __import__("errno").errorcode.get(exc.errno, str(exc.errno))
        os.write(write_end, outcome.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        outcome = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "signal:" + signal.Signals(os.WTERMSIG(status)).name
    return outcome


if __name__ == "__main__":
    print(json.dumps({name: run_in_child(PROBES[name]) for name in sys.argv[1:]}))
