"""Who runs a job, and whether it still does: the owner record and heartbeat of a
`running` status entry, and the judgement that turns a dead or silent owner into
`interrupted` or `stale`.

A job killed with SIGKILL (or its node lost) cannot record its own end, so a status
entry saying `running` proves nothing by itself. Each running job therefore records its
host, pid and the pid's start time (so a reused pid is not mistaken for the job) and
refreshes `heartbeat_utc` every `HEARTBEAT_EVERY_S`. Whoever reads the table judges each
`running` entry: on the same host a gone process means `interrupted`; on any host a
heartbeat older than `STALE_AFTER_S` means `stale` (a process on another node cannot be
probed, and a live process whose heartbeat stopped is hung).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

# Seconds between two heartbeats of a running job.
HEARTBEAT_EVERY_S = 10.0
# A running job whose last heartbeat is older than this is `stale` (six missed beats: a
# loaded shared file system can delay a write by seconds, never by a minute).
STALE_AFTER_S = 60.0


def _process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat),
    or None when there is no such process, only its zombie (dead, not yet reaped), or no
    /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


@dataclass(frozen=True)
class Owner:
    """The process running a job."""

    host: str
    pid: int
    pid_start: str | None

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(host=socket.gethostname(), pid=pid, pid_start=_process_start(pid))

    def fields(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "pid_start": self.pid_start}

    def owns(self, entry: dict[str, Any]) -> bool:
        return (entry.get("host"), entry.get("pid"), entry.get("pid_start")) == (self.host, self.pid, self.pid_start)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _age_s(stamp: Any, now: datetime) -> float | None:
    try:
        then = datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    return (now - then).total_seconds()


def judge(entry: dict[str, Any], now: datetime | None = None, *, here: str | None = None) -> tuple[str, str | None]:
    """The state an entry really has, and why when it is not the recorded one.

    Only `running` entries are judged; every other state is the job's own last word."""
    state = str(entry.get("state", "?"))
    if state != "running":
        return state, None
    now = now or utc_now()
    here = here or socket.gethostname()
    host, pid = entry.get("host"), entry.get("pid")
    who = f"pid {pid} on {host}"
    if host == here and isinstance(pid, int):
        start = _process_start(pid)
        if start is None or (entry.get("pid_start") is not None and start != entry.get("pid_start")):
            return "interrupted", f"{who} has ended without recording an end state (killed or crashed)"
    age = _age_s(entry.get("heartbeat_utc") or entry.get("started_utc"), now)
    if age is None or age > STALE_AFTER_S:
        silent = "no heartbeat recorded" if age is None else f"no heartbeat for {age:.0f} s"
        return "stale", f"{who}: {silent} (limit {STALE_AFTER_S:.0f} s); the job or its node is lost or hung"
    return "running", None
