"""The run directory on the host side: validating client file names, writing the
request's files in and reading `fetch_files` back out without ever following a symlink
the program planted, and removing a directory tree whatever the program did to it."""

from __future__ import annotations

import contextlib
import errno
import os
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
def _parent_dir(
    root: str, name: str, create: bool, owner: Optional[tuple[int, int]] = None
) -> Iterator[tuple[int, str]]:
    """(fd of the directory holding `name`, its base name), reached from `root` one
    component at a time with O_NOFOLLOW, so no symlink (planted by a previous step of
    the program) can redirect us outside the run dir. `create` makes missing dirs."""
    *dirs, base = safe_relative_path(name).split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in dirs:
            made = False
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
            if made and owner is not None:
                os.fchown(fd, *owner)
        yield fd, base
    finally:
        os.close(fd)


def write_file(root: str, name: str, data: bytes, owner: Optional[tuple[int, int]] = None) -> None:
    """Write a client's file into the run directory; `owner` (uid, gid): hand it, and
    any directory made for it, to the run user (a server running as root)."""
    with _parent_dir(root, name, create=True, owner=owner) as (dfd, base):
        fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
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


def remove_tree(path: str) -> None:
    """Remove a directory tree whatever a program did to it: any depth (no recursion and
    at most two open directories: each subdirectory is first renamed up into `path`, so
    the tree is flattened as it is removed), modes of 000, symlinks (never followed).
    A missing `path` is not an error."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            os.unlink(path)
            return
        os.chmod(path, 0o700)
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(top, 0o700)
        pending = ["."]  # directories to empty, as names directly in `top`
        seq = 0
        while pending:
            name = pending.pop()
            fd = _open_dir_at(top, name)
            try:
                for entry in os.listdir(fd):
                    try:
                        os.unlink(entry, dir_fd=fd)
                        continue
                    except IsADirectoryError:
                        pass
                    except PermissionError:  # a directory may also answer EPERM
                        if not _is_dir_at(fd, entry):
                            raise
                    seq += 1
                    flat = f".rm-{seq}"
                    try:
                        os.rename(entry, flat, src_dir_fd=fd, dst_dir_fd=top)
                    except PermissionError:  # moving a directory rewrites its "..": needs w
                        os.chmod(entry, 0o700, dir_fd=fd, follow_symlinks=False)
                        os.rename(entry, flat, src_dir_fd=fd, dst_dir_fd=top)
                    pending.append(flat)
            finally:
                os.close(fd)
            if name != ".":
                os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(path)


def _open_dir_at(parent: int, name: str) -> int:
    """A directory under `parent`, made readable/writable first if its mode forbids it."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=parent)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent, follow_symlinks=False)
        fd = os.open(name, flags, dir_fd=parent)
    st = os.fstat(fd)
    if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _is_dir_at(parent: int, name: str) -> bool:
    return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
