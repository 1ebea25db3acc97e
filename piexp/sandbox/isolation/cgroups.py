"""Per-run memory and pids cgroups: the interface both cgroup versions implement
(cgroups_v1.py, cgroups_v2.py) and what they share (removal, OOM counts, reading the
host's mounts); `isolation.detect_cgroups` picks the version the server can write.
Each run gets its own child cgroup(s) under a per-server parent inside the server's own
cgroup (so container limits still apply above it); a launcher moves the run's first
process there before the program starts, so every descendant is counted."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import time
from abc import ABC, abstractmethod
from typing import Optional


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (\\040 for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mountinfo() -> list[tuple[str, str, str, str]]:
    """(root, mountpoint, fstype, super options) of every mount."""
    rows = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                lparts, rparts = left.split(), right.split()
                if len(lparts) >= 5 and len(rparts) >= 3:
                    rows.append((_unescape(lparts[3]), _unescape(lparts[4]), rparts[0], rparts[2]))
    except OSError:
        pass
    return rows


def own_cgroups() -> dict[str, str]:
    """controller (or '' for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except OSError:
        pass
    return out


def server_tag() -> str:
    """The name of this server's parent cgroup (its pid lets a later server reap it)."""
    return f"piexp-sandbox-{os.getpid()}"


def write_control_file(path: str, value: str) -> None:
    """One write to a cgroup (or /proc) control file, unbuffered: these writes happen
    several times a run, and a text-mode file object costs more than the write itself."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def reap_stale(base: str) -> None:
    """Remove parents left by servers that were SIGKILLed (e.g. by PR_SET_PDEATHSIG)
    and so never ran their cleanup; they are empty once their processes are gone."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith("piexp-sandbox-"):
            continue
        pid = name.rsplit("-", 1)[-1]
        if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        parent = os.path.join(base, name)
        try:
            for child in os.listdir(parent):
                if child.startswith("run-"):
                    os.rmdir(os.path.join(parent, child))
            os.rmdir(parent)
        except OSError:
            pass


class Cgroups(ABC):
    """This server's cgroup parent(s) and the per-run cgroups under them."""

    kind: str  # "v1" or "v2", for logs and tests
    # The file a process (v1: a thread) writes "0" to in order to join a cgroup itself.
    join_file: str
    # The file whose `oom_kill` line counts the OOM killer's kills in a memory cgroup.
    oom_file: str
    # Whether one thread can join a run's cgroups alone (v1), so that the spawner thread
    # starts a sandbox already inside them; a v2 join would move the whole server.
    joins_per_thread: bool
    # v1 only: the `tasks` files of the server's own cgroups, where the spawner thread
    # returns after starting a sandbox (spawn.py); None when unknown or not v1.
    home_tasks: Optional[list[str]] = None

    def __init__(self) -> None:
        self._seq = 0

    @property
    @abstractmethod
    def limits_memory(self) -> bool:
        """Whether a run's memory is limited by its cgroup."""

    @property
    @abstractmethod
    def limits_pids(self) -> bool:
        """Whether a run's processes are counted by its cgroup."""

    @abstractmethod
    def _parents(self) -> list[str]:
        """This server's parent cgroup dirs, removed on close."""

    @abstractmethod
    def _create_dirs(self, name: str, memory_bytes: int, max_pids: int, dirs: list[str]) -> None:
        """Make the run's cgroup dirs named `name` with their limits, appending each to
        `dirs` as soon as it exists (so a failure removes what was made)."""

    def create(self, memory_bytes: int, max_pids: int) -> list[str]:
        """Create the run's cgroup dirs with limits; returns their paths."""
        self._seq += 1
        dirs: list[str] = []
        try:
            self._create_dirs(f"run-{self._seq}", memory_bytes, max_pids, dirs)
        except OSError:
            self.remove(dirs)
            raise
        return dirs

    def joined_dirs(self, run_dirs: list[str]) -> list[str]:
        """The cgroups a run's processes join."""
        return list(run_dirs)

    def self_join_files(self, run_dirs: list[str]) -> list[str]:
        """The files a process (v1: a thread) writes "0" to in order to join the run's
        cgroups itself."""
        return [os.path.join(d, self.join_file) for d in self.joined_dirs(run_dirs)]

    def oom_kills(self, dirs: list[str]) -> int:
        """How many processes the kernel's OOM killer killed in a run's memory cgroup
        (0 where the counter is absent)."""
        for d in dirs:
            try:
                with open(os.path.join(d, self.oom_file)) as f:
                    for line in f:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
            except (OSError, ValueError):
                continue
        return 0

    def _try_remove(self, d: str) -> bool:
        """One attempt to remove a run's cgroup: True when it is gone; otherwise what is
        left in it is killed so that a later attempt can succeed."""
        try:
            os.rmdir(d)
            return True
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return True
            _kill_members(d)
            return False

    def remove(self, dirs: list[str]) -> None:
        """Kill anything left in the run's cgroups and remove them."""
        for d in dirs:
            for _ in range(50):
                if self._try_remove(d):
                    break
                time.sleep(0.01)

    async def aremove(self, dirs: list[str]) -> None:
        """`remove` for the event loop: never blocks it while a cgroup drains."""
        for d in dirs:
            for attempt in range(200):
                if self._try_remove(d):
                    break
                await asyncio.sleep(0.001 * min(16, 1 << attempt))

    def close(self) -> None:
        for parent in self._parents():
            try:
                os.rmdir(parent)
            except OSError:
                pass


def _kill_members(d: str) -> None:
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            for pid in f.read().split():
                if pid == str(os.getpid()):
                    continue  # a server thread left here (spawn.py logs it): never kill ourselves
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
    except OSError:
        pass
