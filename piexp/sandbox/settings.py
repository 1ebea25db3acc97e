"""Server settings, all with defaults and passed by keyword so piexp's config maps onto them."""

from __future__ import annotations

import os
import argparse
from dataclasses import dataclass, field, fields
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

    max_concurrency: int = field(default_factory=_default_concurrency)  # runs at once (cores x 2); the rest queue
    default_memory_limit_mb: int = 1024  # a run's memory limit when the request gives none (-1 or 0)
    output_cap_bytes: int = 1 << 20  # stdout and stderr are each cut to this many bytes
    cpu_time_s: Optional[float] = None  # a run's CPU-time limit; None: the request's run_timeout + 1 s
    max_processes: int = 256  # processes and threads of one run (pids cgroup, else rlimit)
    max_file_size_mb: int = 64  # the largest file a run may write (rlimit)
    max_open_files: int = 256  # open file descriptors of one run (rlimit)
    max_run_timeout_s: float = 600.0  # a request's run_timeout / compile_timeout is clamped to this
    tmpfs_size_mb: int = 256  # size of a run's private /tmp
    fetch_file_cap_bytes: int = 16 << 20  # a file of fetch_files larger than this is not sent back
    allow_unisolated: bool = False  # run programs without isolation where bubblewrap is missing (unsafe)
    use_cgroups: bool = True  # per-run memory and pids cgroups where writable (else rlimits only)
    work_dir: Optional[str] = None  # where run directories are made; None: the system temporary directory
    prespawn: int = 0  # bwrap sandboxes per language started ahead of requests (0 = off)
    launcher: str = "zygote"  # zygote (one process starts every run) or bwrap (one per run)
    # The unprivileged host user and group every run executes as when the server runs
    # as root (a dedicated id: outside Debian's normal users 1000-59999, systemd's
    # dynamic users 61184-65519 and the usual subordinate-id ranges from 100000).
    # Unprivileged, runs are the server's own uid.
    run_uid: int = 99_000
    run_gid: int = 99_000  # the group of that user
    # Per-run cap on the run directory (/sandbox) in MB; tmpfs_size_mb caps /tmp.
    # Enforced when the server runs as root (each is a tmpfs of its own).
    disk_quota_mb: int = 256
    # Per-run cap on files and directories, in /sandbox and in /tmp each.
    inode_quota: int = 20_000
    # Caps on what a client sends, checked before a request waits for a run slot
    # (request_limits.py). "Refused": answered with a SandboxError naming the cap.
    # (run_timeout/compile_timeout above max_run_timeout_s are clamped to it; inf/nan refused.)
    max_memory_limit_mb: int = 4096  # refused: memory_limit_MB above it, or other than -1/0 (default) or 1..cap
    max_request_files: int = 256  # refused: more entries than this in `files`, or in `fetch_files`
    max_request_file_mb: int = 32  # refused: a file of `files` larger than this once decoded
    max_file_name_bytes: int = 1024  # refused: a name in `files`/`fetch_files` longer than this in UTF-8
    max_file_name_depth: int = 32  # refused: a name in `files`/`fetch_files` with more path components
    max_stdin_mb: int = 16  # refused: `stdin` larger than this in UTF-8
    max_request_body_mb: int = 64  # refused with HTTP 413: a request body larger than this
    request_read_timeout_s: float = 30.0  # connection closed: headers (or an idle keep-alive) or a body taking longer
    max_queued_request_mb: int = 256  # refused with HTTP 503 + Retry-After: bodies read or queued for a slot beyond it
    max_connections: int = 256  # refused: a connection beyond it gets HTTP 503 + Retry-After and is closed at once
    max_fetch_total_mb: int = 64  # clamped: fetch_files past this total are left out, named in the message

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}")


# The type each field's command-line value parses to (fields are declared with
# `from __future__ import annotations`, so their types are strings here).
_FLAG_TYPES = {"int": int, "float": float, "str": str, "Optional[float]": float, "Optional[str]": str}
# Spellings kept for the boolean flags that predate the generic mapping.
_BOOL_FLAGS = {"use_cgroups": ("--no-cgroups", False), "allow_unisolated": ("--allow-unisolated", True)}


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    """One `--field-name` option per SandboxSettings field, for `serve` (the server's
    command line is how an embedded server receives its settings)."""
    defaults = SandboxSettings()
    for f in fields(SandboxSettings):
        if f.name in _BOOL_FLAGS:
            flag, value = _BOOL_FLAGS[f.name]
            parser.add_argument(flag, dest=f.name, action="store_const", const=value, default=getattr(defaults, f.name))
        elif f.name == "launcher":
            parser.add_argument("--launcher", choices=LAUNCHERS, default=defaults.launcher)
        else:
            parser.add_argument(
                "--" + f.name.replace("_", "-"), type=_FLAG_TYPES[str(f.type)], default=getattr(defaults, f.name)
            )


def settings_from_flags(args: argparse.Namespace) -> SandboxSettings:
    return SandboxSettings(**{f.name: getattr(args, f.name) for f in fields(SandboxSettings)})


def settings_as_flags(settings: SandboxSettings) -> list[str]:
    """The command line that `settings_from_flags` turns back into `settings`."""
    argv: list[str] = []
    for f in fields(SandboxSettings):
        value = getattr(settings, f.name)
        if f.name in _BOOL_FLAGS:
            flag, set_value = _BOOL_FLAGS[f.name]
            argv += [flag] if value == set_value else []
        elif value is not None:
            argv += ["--" + f.name.replace("_", "-"), str(value)]
    return argv
