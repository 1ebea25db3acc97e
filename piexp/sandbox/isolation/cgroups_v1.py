"""Per-run cgroups on the v1 hierarchies: a run's own `memory` and `pids` cgroups
(whichever are mounted and writable), plus one `cpu` cgroup shared by every run of
this server so that the runs together weigh as one session against the harness."""

from __future__ import annotations

import os
import threading
from typing import Optional

from .cgroups import Cgroups, reap_stale, server_tag, write_control_file


class CgroupsV1(Cgroups):
    kind = "v1"
    join_file = "tasks"  # moves only the writing thread, without the global rwsem
    oom_file = "memory.oom_control"
    joins_per_thread = True

    def __init__(
        self, parents: dict[str, str], cpu_share_dir: Optional[str] = None, home_tasks: Optional[list[str]] = None
    ) -> None:
        super().__init__()
        self.parents = parents  # controller ("memory", "pids") -> this server's parent dir
        # One cpu cgroup that every run of this server joins. Each session is its own
        # scheduling autogroup, so without it eight sandboxed programs got eight CPU
        # shares against the harness's one, and the harness (rendering, tools, reward)
        # waited for the CPU; together they now weigh as one (cpu.shares 1024, as a
        # nice-0 session). CFS is work-conserving: an idle harness costs the programs
        # nothing (bench/rollouts.py measures the harness share).
        self.cpu_share_dir = cpu_share_dir
        self.home_tasks = home_tasks

    @classmethod
    def detect(cls, mounts, own: dict[str, str]) -> Optional["CgroupsV1"]:
        """Separate memory and pids hierarchies; None when neither is writable."""
        tag = server_tag()
        parents: dict[str, str] = {}
        for controller in ("memory", "pids"):
            base = _base(mounts, own, controller)
            if base is None:
                continue
            parent = os.path.join(base, tag)
            try:
                os.mkdir(parent)
                parents[controller] = parent
            except OSError:
                pass
        if not parents:
            return None
        cpu_share_dir = _make_cpu_share_dir(mounts, own, tag)
        joined = [*parents.values(), *([cpu_share_dir] if cpu_share_dir else [])]
        return cls(parents, cpu_share_dir, _verified_home_tasks(joined))

    @property
    def limits_memory(self) -> bool:
        return "memory" in self.parents

    @property
    def limits_pids(self) -> bool:
        return "pids" in self.parents

    def _parents(self) -> list[str]:
        return [*self.parents.values(), *([self.cpu_share_dir] if self.cpu_share_dir else [])]

    def joined_dirs(self, run_dirs: list[str]) -> list[str]:
        """The run's own cgroups, plus the server's shared cpu one."""
        return [*run_dirs, self.cpu_share_dir] if run_dirs and self.cpu_share_dir else list(run_dirs)

    def _create_dirs(self, name: str, memory_bytes: int, max_pids: int, dirs: list[str]) -> None:
        if "memory" in self.parents:
            d = os.path.join(self.parents["memory"], name)
            os.mkdir(d)
            dirs.append(d)
            write_control_file(os.path.join(d, "memory.limit_in_bytes"), str(memory_bytes))
            try:
                write_control_file(os.path.join(d, "memory.memsw.limit_in_bytes"), str(memory_bytes))
            except OSError:
                pass
        if "pids" in self.parents:
            d = os.path.join(self.parents["pids"], name)
            os.mkdir(d)
            dirs.append(d)
            write_control_file(os.path.join(d, "pids.max"), str(max_pids))


def _verified_home_tasks(joined_parents: list[str]) -> Optional[list[str]]:
    """The `tasks` file of each joined parent's own parent (this server's cgroup),
    provided this thread is listed in it, so that returning there is exact."""
    me = str(threading.get_native_id())
    homes = []
    for parent in joined_parents:
        tasks = os.path.join(os.path.dirname(parent), "tasks")
        try:
            with open(tasks) as f:
                if me not in f.read().split():
                    return None
        except OSError:
            return None
        homes.append(tasks)
    return homes


def _base(mounts, own: dict[str, str], controller: str) -> Optional[str]:
    """This server's own cgroup dir in the v1 hierarchy of `controller` (stale parents
    of dead servers reaped), or None when that controller is not mounted."""
    for root, mnt, fstype, opts in mounts:
        if fstype != "cgroup" or controller not in opts.split(","):
            continue
        path = own.get(controller, "/")
        rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
        base = os.path.normpath(os.path.join(mnt, rel))
        if not os.path.isdir(base):
            base = mnt
        reap_stale(base)
        return base
    return None


def _make_cpu_share_dir(mounts, own: dict[str, str], tag: str) -> Optional[str]:
    base = _base(mounts, own, "cpu")
    if base is None:
        return None
    directory = os.path.join(base, tag)
    try:
        os.mkdir(directory)
        write_control_file(os.path.join(directory, "cpu.shares"), "1024")
        return directory
    except OSError:
        return None
