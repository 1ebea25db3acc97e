"""Server settings, all with defaults and passed by keyword so piexp's config maps onto them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional


def _default_concurrency() -> int:
    return (os.cpu_count() or 1) * 2


@dataclass(frozen=True)
class SandboxSettings:
    """Limits applied to every run.

    `cpu_time_s=None` derives the CPU limit from the request's `run_timeout` (plus one
    second), so a busy loop dies by wall time or CPU time, whichever comes first.
    `work_dir=None` means the system temporary directory; run directories are created
    (and always removed) below it.
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
