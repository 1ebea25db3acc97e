"""Whole-file writes for files other processes read while they change (markers, status
tables, manifests): readers, and writers on other nodes of a shared file system, see the
old file or the new one, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
