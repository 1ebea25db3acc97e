"""Per-run cgroups on the unified (v2) hierarchy: one child cgroup a run with
`memory.max`, `memory.swap.max` 0 and `pids.max`, under a parent with memory and pids
enabled for its children."""

from __future__ import annotations

import os
from typing import Optional

from .cgroups import Cgroups, reap_stale, server_tag, write_control_file


class CgroupsV2(Cgroups):
    kind = "v2"
    join_file = "cgroup.procs"
    oom_file = "memory.events"
    joins_per_thread = False

    def __init__(self, parent: str) -> None:
        super().__init__()
        self.parent = parent  # this server's parent cgroup dir

    @classmethod
    def detect(cls, mounts, own: dict[str, str]) -> Optional["CgroupsV2"]:
        """Needs a writable own cgroup with memory and pids delegated."""
        for root, mnt, fstype, _ in mounts:
            if fstype != "cgroup2" or "" not in own:
                continue
            rel = os.path.relpath(own[""], root) if own[""].startswith(root) else own[""].lstrip("/")
            base = os.path.normpath(os.path.join(mnt, rel))
            try:
                with open(os.path.join(base, "cgroup.controllers")) as f:
                    available = f.read().split()
                if not {"memory", "pids"} <= set(available):
                    continue
                reap_stale(base)
                parent = os.path.join(base, server_tag())
                os.mkdir(parent)
                try:
                    write_control_file(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
                except OSError:
                    os.rmdir(parent)
                    continue
                return cls(parent)
            except OSError:
                continue
        return None

    @property
    def limits_memory(self) -> bool:
        return True

    @property
    def limits_pids(self) -> bool:
        return True

    def _parents(self) -> list[str]:
        return [self.parent]

    def _create_dirs(self, name: str, memory_bytes: int, max_pids: int, dirs: list[str]) -> None:
        d = os.path.join(self.parent, name)
        os.mkdir(d)
        dirs.append(d)
        write_control_file(os.path.join(d, "memory.max"), str(memory_bytes))
        try:
            write_control_file(os.path.join(d, "memory.swap.max"), "0")
        except OSError:
            pass
        write_control_file(os.path.join(d, "pids.max"), str(max_pids))
