"""A run's resource limits (CPU time, file size, open files, processes, and memory where
no memory cgroup limits it) and the setrlimit/prlimit pairs every launcher applies."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Limits:
    cpu_time_s: int
    file_size_bytes: int
    open_files: int
    processes: Optional[int]  # RLIMIT_NPROC; None where a pids cgroup bounds the run
    address_space_bytes: Optional[int] = None  # RLIMIT_AS (python without memory cgroup)
    data_bytes: Optional[int] = None  # RLIMIT_DATA (node/julia without memory cgroup)


def rlimit_pairs(limits: Limits) -> list[tuple[int, tuple[int, int]]]:
    """(resource, (soft, hard)) for every rlimit a run gets."""
    pairs = [
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s + 1)),
        (resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes)),
        (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
    ]
    if limits.processes is not None:
        pairs.append((resource.RLIMIT_NPROC, (limits.processes, limits.processes)))
    if limits.address_space_bytes is not None:
        pairs.append((resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes)))
    if limits.data_bytes is not None:
        pairs.append((resource.RLIMIT_DATA, (limits.data_bytes, limits.data_bytes)))
    return pairs
