"""The processes a sweep leaves when Ctrl-C ends it: its job workers (joblib's process
pool) and what they started, found through /proc. Each job stops its own sandbox and
records itself interrupted on the way out; `end_child_processes` gives them a bounded
time for that and kills what is still there, so that the sweep's command returns with
nothing of it left running (an idle pool worker would otherwise wait minutes for work)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

#: joblib's resource tracker ends by itself once every process holding its pipe has
#: ended (this one last), so it is not waited for.
_ENDS_WITH_US = ("resource_tracker",)


def _parents() -> dict[int, int]:
    """Each running process's parent, from /proc/PID/stat (after the name in parentheses:
    the state, then the parent); a zombie (state Z) has ended and is left out."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            parents[int(entry.name)] = int(parent)
    return parents


def descendants(pid: int) -> set[int]:
    """The processes below `pid` (children, their children, ...) at this moment."""
    return set(_top_down(pid))


def _top_down(pid: int) -> list[int]:
    """`descendants(pid)`, each process before any process below it."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    seen: set[int] = set()
    level = [pid]
    while level:
        below = [child for parent in level for child in children.get(parent, []) if child not in seen]
        seen.update(below)
        found.extend(below)
        level = below
    return found


def _waited_for(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return not any(marker in command for marker in _ENDS_WITH_US)


def end_child_processes(grace_s: float = 30.0) -> list[int]:
    """Wait up to `grace_s` for this process's descendants to end, then SIGKILL those
    left, each before the processes it started; returns the killed ones' pids (sorted;
    empty when all ended in time)."""
    deadline = time.monotonic() + grace_s
    while True:
        left = [pid for pid in _top_down(os.getpid()) if _waited_for(pid)]
        if not left:
            return []
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    # Parents first: a parent killed after its child could see the child end and act on
    # it meanwhile (exit with its own status, start another) on a busy machine.
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return sorted(left)
