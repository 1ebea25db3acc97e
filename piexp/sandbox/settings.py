"""Server settings, all with defaults and passed by keyword so piexp's config maps onto them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional


LAUNCHERS = ("zygote", "bwrap")


def _default_concurrency() -> int:
    return (os.cpu_count() or 1) * 2


@dataclass(frozen=True)
class SandboxSettings:
    """Limits applied to every run.

    `cpu_time_s=None` derives the CPU limit from the request's `run_timeout` (plus one
    second), so a busy loop dies by wall time or CPU time, whichever comes first.
    `work_dir=None` means the system temporary directory; run directories are created
    (and always removed) below it.

    `prespawn=N` keeps N sandboxes per language started ahead of requests (bwrap set up,
    cgroups joined, rlimits set, held before the program starts; each is used once), so
    a request only writes its files and releases one: the bwrap start, namespace and
    mount setup and the cgroup attach (an RCU grace period under cgroup v1) leave the
    request's latency. Isolation is identical to a cold start. Off by default: idle
    sandboxes (a run dir under `work_dir`, two processes each) exist between requests,
    which a "nothing left behind" check would count. Used for requests with the default
    memory limit (node's command line depends on it). Needs `launcher="bwrap"`.

    `launcher`: how an isolated run starts. "zygote" (default): one long-lived process
    holds the sandbox's read-only root and starts each run in fresh namespaces inside it
    (zygote.py; compiled with the system's C compiler on first use, ~3 ms less CPU a run
    than bwrap); it falls back to "bwrap" by itself, with a warning, where it cannot be
    built or started. "bwrap": one bubblewrap per run.
    """

    max_concurrency: int = field(default_factory=_default_concurrency)
    default_memory_limit_mb: int = 1024
    output_cap_bytes: int = 1 << 20
    cpu_time_s: Optional[float] = None
    max_processes: int = 256
    max_file_size_mb: int = 64
    max_open_files: int = 256
    max_run_timeout_s: float = 600.0
    tmpfs_size_mb: int = 256
    fetch_file_cap_bytes: int = 16 << 20
    allow_unisolated: bool = False
    use_cgroups: bool = True
    work_dir: Optional[str] = None
    prespawn: int = 0
    launcher: str = "zygote"

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}")
