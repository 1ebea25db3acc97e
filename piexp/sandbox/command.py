"""A run's command line and resource limits, from its language, runtime and memory limit.

Memory is limited by a cgroup when one is writable; otherwise per runtime, since
RLIMIT_AS breaks node (V8 reserves huge virtual ranges): python gets RLIMIT_AS, node
`--max-old-space-size` plus RLIMIT_DATA (which counts only writable private memory
actually mapped), julia RLIMIT_DATA. Under a memory cgroup node gets no V8 flag at all:
any V8 flag changes V8's flag hash, so node would reject its built-in code cache and
compile its own modules at every start (bench/sandbox.py measures that cost)."""

from __future__ import annotations

from typing import Optional

from .isolation.cgroups import Cgroups
from .isolation.layout import Runtime
from .isolation.rlimits import Limits
from .protocol import PROTOCOL_LANGUAGES
from .settings import SandboxSettings


def run_command(
    language: str,
    runtime: Runtime,
    memory_mb: int,
    cpu_time_s: int,
    settings: SandboxSettings,
    cgroups: Optional[Cgroups],
) -> tuple[list[str], Limits]:
    """The argv that runs the program file and the limits of its run; `cgroups`: the
    cgroups the run gets (None: rlimits only)."""
    s = settings
    spec = PROTOCOL_LANGUAGES[language]
    cmd = [runtime.binary, *spec.flags]
    as_bytes = data_bytes = None
    if not (cgroups is not None and cgroups.limits_memory):
        if spec.v8_heap_flag:
            # Only without a cgroup: under one, any V8 flag would cost node its code
            # cache (see the module docstring).
            cmd.append(f"--max-old-space-size={max(16, memory_mb * 3 // 4)}")
        if spec.memory_rlimit == "address_space":
            as_bytes = memory_mb << 20
        else:
            data_bytes = memory_mb << 20
    cmd.append(spec.code_file)
    return cmd, Limits(
        cpu_time_s=cpu_time_s,
        file_size_bytes=s.max_file_size_mb << 20,
        open_files=s.max_open_files,
        # Per uid, so shared by every run of one user namespace: only where no pids
        # cgroup counts each run's processes exactly.
        processes=None if cgroups is not None and cgroups.limits_pids else s.max_processes,
        address_space_bytes=as_bytes,
        data_bytes=data_bytes,
    )
