"""Whole-file writes, line-by-line JSON reads and build locks for the files piexp shares
between processes (markers, status tables, manifests, episode and metrics logs, cache
entries): a reader, or a writer on another node of a shared file system, sees the old
file or the new one, never a mix; a log cut short by a kill is read up to its last
complete line; and a cache entry is built by one process while the others wait."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` whole or not at all: a temp file in the same folder (a
    unique name, so writers on several nodes never share one), flushed to disk, made
    readable (mkstemp creates 0600), then renamed over `path` (atomic on one file system,
    NFS included)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order; a missing or unreadable file is
    empty, and lines that are not a whole JSON object (the line being written when a
    process was killed) are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    rows: list[dict[str, Any]] = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created if missing) for the block:
    concurrent processes building the same cache entry (two runs, a parallel sweep, test
    workers) take turns, and each checks again inside the block whether the entry is
    already there. The kernel drops the lock when its holder dies, so a killed builder
    never leaves the others waiting."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
