"""Workspace path rules shared by every tool: relative, no `..`, not empty or `.`."""

from __future__ import annotations

from pathlib import PurePosixPath


def normalize_workspace_path(value: str) -> str | None:
    """The normalized relative path, or None when the path is not allowed."""
    if not isinstance(value, str) or not value:
        return None
    path = PurePosixPath(value)
    if path.is_absolute() or ".." in path.parts:
        return None
    normalized = str(path)
    return normalized if normalized not in {"", "."} else None
