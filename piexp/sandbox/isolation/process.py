"""A sandbox's processes as the kernel sees them: the server dies with its parent
(PR_SET_PDEATHSIG), reaps orphaned sandbox inits itself (PR_SET_CHILD_SUBREAPER), kills
a sandbox by its process group, and, for unisolated runs only, confines a child in a
preexec function."""

from __future__ import annotations

import ctypes
import os
import resource
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


def make_preexec(limits: Limits, cgroup_dirs: list[str]) -> Callable[[], None]:
    """The function run in the child between fork and exec (only for unisolated runs,
    without bwrap): join the run's cgroups, set rlimits, and die if the server dies.
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
