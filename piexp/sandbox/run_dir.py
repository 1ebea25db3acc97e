"""The run directory on the host side: validating client file names, writing the
request's files in and reading `fetch_files` back out without ever following a symlink
the program planted, and removing the directory whatever the program did to it."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from typing import Optional


class UnsafePathError(ValueError):
    """A file name in `files`/`fetch_files` that could reach outside the run directory."""


def safe_relative_path(name: str) -> str:
    """Validate a client-supplied file name: relative, no `..`, no empty/`.` name, no NUL.
    Returns the normalised relative path."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise UnsafePathError(f"file name {name!r} is empty or contains NUL")
    if name.startswith("/") or name.startswith("\\"):
        raise UnsafePathError(f"file name {name!r} is absolute")
    parts = name.replace("\\", "/").split("/")
    if any(p == ".." for p in parts):
        raise UnsafePathError(f"file name {name!r} contains '..'")
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        raise UnsafePathError(f"file name {name!r} names no file")
    return "/".join(parts)


@contextlib.contextmanager
def _parent_dir(root: str, name: str, create: bool) -> Iterator[tuple[int, str]]:
    """(fd of the directory holding `name`, its base name), reached from `root` one
    component at a time with O_NOFOLLOW, so no symlink (planted by a previous step of
    the program) can redirect us outside the run dir. `create` makes missing dirs."""
    *dirs, base = safe_relative_path(name).split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in dirs:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        yield fd, base
    finally:
        os.close(fd)


def write_file(root: str, name: str, data: bytes) -> None:
    with _parent_dir(root, name, create=True) as (dfd, base):
        fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def read_file(root: str, name: str, cap: int) -> Optional[bytes]:
    """Read a file the program left behind, refusing symlinks anywhere on the path and
    anything that is not a regular file (a FIFO would block us). None if absent/refused."""
    try:
        with _parent_dir(root, name, create=False) as (dfd, base):
            fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return None if total > cap else b"".join(chunks)
    finally:
        os.close(fd)


def remove_run_dir(path: str) -> None:
    """Remove a run directory even if the program chmod-ed parts of it to 000."""

    def onerror(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)
