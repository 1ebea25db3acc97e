"""The server's caps on what a client sends: `refusal(req, settings)` checks a parsed
`/run_code` request against SandboxSettings' caps (memory, time, files, names, stdin)
and says which cap a request exceeds, and `QueuedBytes` bounds the request bodies held
by requests being read or waiting for a run slot. Both run before a request takes a
slot, so a hostile request never costs a run. Time-outs above `max_run_timeout_s` are
clamped by the runner, not refused; everything else here is refused."""

from __future__ import annotations

import math
from typing import Optional

from .protocol import RunCodeRequest
from .run_dir import UnsafePathError, safe_relative_path
from .settings import SandboxSettings

# memory_limit_MB values meaning "the server's default" (SandboxFusion's convention).
_DEFAULT_MEMORY = (-1, 0)


def _decoded_size(b64: str) -> int:
    """Size of a base64 string once decoded, without decoding it (validity is checked
    by the runner when it decodes)."""
    return len(b64) * 3 // 4 - (len(b64) - len(b64.rstrip("=")))


def _name_refusal(field: str, name: str, s: SandboxSettings) -> Optional[str]:
    size = len(name.encode("utf-8", errors="surrogatepass"))
    if size > s.max_file_name_bytes:
        return (
            f"a name in {field} is {size} bytes long, above the server's cap of "
            f"{s.max_file_name_bytes} (max_file_name_bytes)"
        )
    try:
        depth = len(safe_relative_path(name).split("/"))
    except UnsafePathError as exc:
        return str(exc)
    if depth > s.max_file_name_depth:
        return (
            f"a name in {field} has {depth} path components, above the server's cap of "
            f"{s.max_file_name_depth} (max_file_name_depth)"
        )
    return None


def refusal(req: RunCodeRequest, s: SandboxSettings) -> Optional[str]:
    """Why `req` is refused (a message naming the cap and its setting), or None."""
    mem = req.memory_limit_MB
    if mem not in _DEFAULT_MEMORY and not 1 <= mem <= s.max_memory_limit_mb:
        return (
            f"memory_limit_MB={mem} is not -1/0 (the default) or 1..{s.max_memory_limit_mb}, "
            f"the server's cap (max_memory_limit_mb)"
        )
    for name in ("run_timeout", "compile_timeout"):
        value = getattr(req, name)
        if not math.isfinite(value):
            return f"{name}={value} is not a finite number of seconds"
    files = req.files or {}
    fetch = req.fetch_files or []
    for field, count in (("files", len(files)), ("fetch_files", len(fetch))):
        if count > s.max_request_files:
            return f"{field} has {count} entries, above the server's cap of {s.max_request_files} (max_request_files)"
    file_cap = s.max_request_file_mb << 20
    for name, content in files.items():
        why = _name_refusal("files", name, s)
        if why:
            return why
        size = _decoded_size(content or "")
        if size > file_cap:
            return (
                f"file {name[:100]!r} is {size} bytes, above the server's cap of "
                f"{s.max_request_file_mb} MB (max_request_file_mb)"
            )
    for name in fetch:
        why = _name_refusal("fetch_files", name, s)
        if why:
            return why
    if req.stdin is not None:
        size = len(req.stdin.encode("utf-8", errors="surrogatepass"))
        if size > s.max_stdin_mb << 20:
            return f"stdin is {size} bytes, above the server's cap of {s.max_stdin_mb} MB (max_stdin_mb)"
    return None


class QueuedBytes:
    """Bytes of request bodies held by requests not yet running (being read, parsed or
    waiting for a slot), bounded by `max_queued_request_mb`: without a bound, a burst of
    large requests queued behind busy slots holds them all in the server's memory."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self.held = 0

    def reserve(self, size: int) -> Optional["Reservation"]:
        """Reserve `size` bytes, or None when they do not fit. A single request larger
        than the whole budget is let through when nothing else is held, so that the
        body cap, not this one, decides about it."""
        if self.held and self.held + size > self.cap_bytes:
            return None
        self.held += size
        return Reservation(self, size)


class Reservation:
    """One request's share of `QueuedBytes`, given back (once) when it starts running
    or is answered, whichever comes first."""

    def __init__(self, budget: QueuedBytes, size: int) -> None:
        self._budget: Optional[QueuedBytes] = budget
        self.size = size

    def release(self) -> None:
        if self._budget is not None:
            self._budget.held -= self.size
            self._budget = None
