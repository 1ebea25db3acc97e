"""A sandbox's processes as the kernel sees them: the server dies with its parent
(PR_SET_PDEATHSIG), reaps orphaned sandbox inits itself (PR_SET_CHILD_SUBREAPER), kills
a sandbox by its process group, starts a child as the run user with its rlimits through
programs it execs (`limits_exec_prefix`), and, for unisolated runs under cgroup v2 only,
confines a child in a preexec function."""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import shutil
import signal
from typing import Callable

from .cgroups import write_control_file
from .rlimits import Limits, rlimit_pairs

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux only), so
    a server started by piexp can never be left orphaned."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        pass


def set_child_subreaper() -> None:
    """Make orphaned descendants (a sandbox's init, once the outer bwrap has exited) be
    reparented to this process rather than the host's init, so the runner can reap them
    as soon as they exit (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        pass


#: prlimit's option for each rlimit a run gets (rlimits.rlimit_pairs).
PRLIMIT_OPTIONS = {
    resource.RLIMIT_CORE: "--core",
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_NOFILE: "--nofile",
    resource.RLIMIT_NPROC: "--nproc",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_DATA: "--data",
}


def limits_exec_prefix(limits: Limits) -> list[str]:
    """The programs a child started as the run user execs before its own, in place (the
    same pid): util-linux's prlimit sets the run's rlimits on itself, then setpriv sets
    its parent-death signal. What a `preexec_fn` would do, without Python in the child:
    CPython runs a preexec function in a fork of the whole (threaded) process after
    re-initialising its interpreter state there, which deadlocks when another thread held
    the interpreter's thread-state lock at the fork, and the spawn waits for that child
    forever. As the run user the child may lower its own limits, which a server without
    CAP_SYS_RESOURCE could not do for it with prlimit(2). Raises FileNotFoundError when
    either program is missing."""
    prlimit, _ = _util_linux()
    options = [f"{PRLIMIT_OPTIONS[res]}={soft}:{hard}" for res, (soft, hard) in rlimit_pairs(limits)]
    return [prlimit, *options, "--", *death_signal_exec_prefix()]


def death_signal_exec_prefix() -> list[str]:
    """setpriv, exec'd in place before a child's own program, gives the child SIGKILL as
    its parent-death signal: `set_parent_death_signal` without a `preexec_fn` (see
    `limits_exec_prefix`). Raises FileNotFoundError when util-linux is missing."""
    return [_util_linux()[1], "--pdeathsig", "KILL", "--"]


@functools.cache
def _util_linux() -> tuple[str, str]:
    found = {name: shutil.which(name) for name in ("prlimit", "setpriv")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise FileNotFoundError(
            f"{' and '.join(missing)} (util-linux) not found: the sandbox starts its run user's processes through them"
        )
    return str(found["prlimit"]), str(found["setpriv"])


def make_preexec(limits: Limits, cgroup_dirs: list[str]) -> Callable[[], None]:
    """The function run in the child between fork and exec (only for unisolated runs,
    without bwrap, under cgroup v2, where the spawner thread cannot join the run's cgroups
    alone): join the run's cgroups, set rlimits, and die if the server dies.
    It must only make async-signal-safe-ish syscalls: no locks, no logging."""

    pairs = rlimit_pairs(limits)

    def preexec() -> None:
        pid = str(os.getpid())
        for d in cgroup_dirs:
            write_control_file(os.path.join(d, "cgroup.procs"), pid)
        set_parent_death_signal(signal.SIGKILL)
        for res, pair in pairs:
            resource.setrlimit(res, pair)

    return preexec


def kill_process_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (bwrap is started as a session leader).
    bwrap's `--die-with-parent` then takes down the sandbox's pid namespace, and with it
    every process inside, including ones that called setsid() to escape the group."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
