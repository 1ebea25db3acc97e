"""The server's private area on the host for run directories, and who owns them.

Each server gets one directory (`piexp-runs-*`, mode 0700, owned by the run user) under
its work dir, locked while the server lives. Every run gets two directories in it: its
working directory (`/sandbox`) and its `/tmp`. A server running as root makes each a
tmpfs of its own, capped in bytes and inodes (a write beyond the cap fails inside the
run with ENOSPC, and `quota_hits` says which cap was reached) and removed with one
unmount, whatever the program left there. Unprivileged, it cannot mount: the working
directory is a plain directory (no byte or inode cap, removed by `run_dir.remove_tree`)
and /tmp is the launcher's own size-capped tmpfs. Runtime prefixes the run user could
not reach (a pyenv under a 0700 /root) are shown to it through read-only bind mounts in
the area. An area left by a killed server (its lock is free) is removed, mounts and all,
when the next server starts in the same work dir.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import itertools
import logging
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

from .isolation import mountinfo
from .run_dir import remove_tree

log = logging.getLogger(__name__)

AREA_PREFIX = "piexp-runs-"
_LOCK_NAME = ".lock"
_LAYOUT_DIR = ".layout"
_UNLOCKED_GRACE_S = 60.0  # an area without a lock file this old was never taken

# <sys/mount.h>
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MS_PRIVATE, MS_SHARED = 1 << 18, 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: Optional[str], target: str, fstype: Optional[str], flags: int, data: Optional[str] = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or fstype} on {target}: {os.strerror(err)}")


def _detach(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
            raise OSError(err, f"unmount {target}: {os.strerror(err)}")


def _mount_points_under(path: str) -> list[str]:
    """Mount points at or below `path`, deepest first (so each unmount is of a leaf)."""
    prefix = path.rstrip("/") + "/"
    points = [point for _, point, _, _ in mountinfo() if point == path or point.startswith(prefix)]
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


# Capabilities (bit, name) a root server needs to start runs as the run user and hand
# their files to it.
_SWITCH_CAPABILITIES = ((0, "CAP_CHOWN"), (6, "CAP_SETGID"), (7, "CAP_SETUID"))


def _effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


@dataclass(frozen=True)
class RunUser:
    """The host uid and gid every run executes as. `switched`: the server runs as root
    and hands runs to this unprivileged identity; otherwise it is the server's own."""

    uid: int
    gid: int
    switched: bool

    @classmethod
    def for_server(cls, run_uid: int, run_gid: int) -> "RunUser":
        if os.geteuid() != 0:
            return cls(os.geteuid(), os.getegid(), False)
        if run_uid <= 0 or run_gid <= 0:
            raise RuntimeError(
                f"sandbox run_uid/run_gid must name an unprivileged host user (> 0), got {run_uid}/{run_gid}: "
                "runs must never be host root"
            )
        missing = [name for bit, name in _SWITCH_CAPABILITIES if not _effective_capabilities() >> bit & 1]
        if missing:
            raise RuntimeError(
                f"the sandbox server runs as root without {', '.join(missing)}, so it cannot hand runs to the "
                f"unprivileged run user (uid {run_uid}) and would run them as host root: run the server as an "
                "unprivileged user instead, or give it these capabilities"
            )
        return cls(run_uid, run_gid, True)

    def can_reach(self, path: str) -> bool:
        """Whether this user may traverse every directory on the way to `path` (and the
        path itself, when it is a directory), judged from the modes and owners."""
        path = os.path.realpath(path)
        parts = path.strip("/").split("/") if path != "/" else []
        for i in range(len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            try:
                st = os.stat(d)
            except OSError:
                return False
            if not stat.S_ISDIR(st.st_mode):
                continue
            if st.st_uid == self.uid:
                ok = st.st_mode & stat.S_IXUSR
            elif st.st_gid == self.gid:
                ok = st.st_mode & stat.S_IXGRP
            else:
                ok = st.st_mode & stat.S_IXOTH
            if not ok:
                return False
        return True


@dataclass
class RunDirs:
    """One run's directories on the host: `work` (its /sandbox) and `tmp` (its /tmp,
    None when the launcher mounts /tmp itself)."""

    work: str
    tmp: Optional[str]
    mounted: bool

    @property
    def name(self) -> str:
        return os.path.basename(self.work)

    @property
    def tmp_name(self) -> Optional[str]:
        return os.path.basename(self.tmp) if self.tmp else None


@dataclass
class RunArea:
    """See the module docstring. `disk_quota_bytes`/`inode_quota` cap each run's
    working directory; `tmp_bytes`/`inode_quota` its /tmp."""

    path: str
    user: RunUser
    mounts: bool  # per-run tmpfs mounts (the server may mount: root)
    disk_quota_bytes: int
    tmp_bytes: int
    inode_quota: int
    _lock_fd: int = -1
    _seq: itertools.count = field(default_factory=lambda: itertools.count(1))
    _views: dict[str, str] = field(default_factory=dict)

    @classmethod
    def create(
        cls, work_dir: Optional[str], user: RunUser, *, disk_quota_bytes: int, tmp_bytes: int, inode_quota: int
    ) -> "RunArea":
        base = os.path.realpath(work_dir or tempfile.gettempdir())
        reap_stale_areas(base)
        if user.switched and not user.can_reach(base):
            raise RuntimeError(
                f"the sandbox work dir {base} cannot be reached by the run user (uid {user.uid}): a directory on "
                "its path is closed to other users; choose a work dir under a world-traversable directory such "
                "as /tmp, or give that uid access"
            )
        path = tempfile.mkdtemp(prefix=AREA_PREFIX, dir=base)
        area = cls(
            path,
            user,
            mounts=os.geteuid() == 0,
            disk_quota_bytes=disk_quota_bytes,
            tmp_bytes=tmp_bytes,
            inode_quota=inode_quota,
        )
        try:
            area._lock_fd = os.open(os.path.join(path, _LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(area._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if user.switched:
                os.chown(path, user.uid, user.gid)
            if area.mounts:
                # A mount point of its own, in a peer group of its own: the runs' tmpfs
                # mounts below it propagate into the zygote's namespace (a slave of it).
                try:
                    _mount(path, path, None, MS_BIND)
                except PermissionError:
                    # Root without CAP_SYS_ADMIN (a container's default): no mounts.
                    area.mounts = False
                    log.warning(
                        "the sandbox server may not mount (no CAP_SYS_ADMIN): run directories get no "
                        "byte or file quota; /tmp keeps the launcher's size cap"
                    )
                else:
                    _mount(None, path, None, MS_PRIVATE)
                    _mount(None, path, None, MS_SHARED)
        except BaseException:
            area.close()
            raise
        return area

    def view_of(self, prefix: str) -> str:
        """`prefix` itself when the run user can reach it, else a read-only bind of it
        inside the area (root only) that the launchers bind in its place."""
        if not self.user.switched or self.user.can_reach(prefix):
            return prefix
        if not self.mounts:
            raise RuntimeError(
                f"the runtime {prefix} lies under a directory the run user (uid {self.user.uid}) cannot enter, "
                "and this server may not mount (no CAP_SYS_ADMIN) to show it a read-only view: install the "
                "runtime under /usr or another world-readable prefix, or let the server mount"
            )
        if prefix not in self._views:
            view = os.path.join(self.path, _LAYOUT_DIR, str(len(self._views)))
            os.makedirs(view, 0o755)
            os.chmod(os.path.dirname(view), 0o755)
            _mount(prefix, view, None, MS_BIND | MS_REC)
            _mount(None, view, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
            self._views[prefix] = view
        return self._views[prefix]

    def reachable_copy(self, path: str) -> str:
        """`path` itself when the run user can reach it, else a copy of the file in the
        area (root-owned, 0555) that it can execute (the zygote, built into root's cache)."""
        if not self.user.switched or self.user.can_reach(os.path.dirname(path)):
            return path
        copy = os.path.join(self.path, os.path.basename(path))
        if not os.path.exists(copy):
            shutil.copyfile(path, copy + ".part")
            os.chmod(copy + ".part", 0o555)
            os.replace(copy + ".part", copy)
        return copy

    def new_run(self, with_tmp: bool = True) -> RunDirs:
        """Directories for one run: mode 0700, owned by the run user; with mounts, each a
        capped tmpfs (`with_tmp=False`: no /tmp directory, the launcher mounts its own)."""
        n = next(self._seq)
        work = os.path.join(self.path, f"run-{n}")
        tmp = os.path.join(self.path, f"run-{n}.tmp") if with_tmp and self.mounts else None
        made: list[str] = []
        try:
            for d, size in ((work, self.disk_quota_bytes), (tmp, self.tmp_bytes)):
                if d is None:
                    continue
                os.mkdir(d, 0o700)
                made.append(d)
                if self.mounts:
                    _mount(
                        "tmpfs",
                        d,
                        "tmpfs",
                        MS_NOSUID | MS_NODEV,
                        f"size={size},nr_inodes={self.inode_quota},mode=0700,uid={self.user.uid},gid={self.user.gid}",
                    )
                elif self.user.switched:
                    os.chown(d, self.user.uid, self.user.gid)
        except BaseException:
            for d in made:
                _detach(d)
                os.rmdir(d)
            raise
        return RunDirs(work, tmp, self.mounts)

    def quota_hits(self, run: RunDirs) -> list[str]:
        """The caps this run reached, as phrases for its stderr (empty when none)."""
        hits: list[str] = []
        if not run.mounted:
            return hits
        for d, where, size in ((run.work, "/sandbox", self.disk_quota_bytes), (run.tmp, "/tmp", self.tmp_bytes)):
            if d is None:
                continue
            try:
                sv = os.statvfs(d)
            except OSError:
                continue
            if sv.f_bavail == 0:
                hits.append(f"disk quota of {where} ({size >> 20} MB)")
            if sv.f_favail == 0:
                hits.append(f"file count quota of {where} ({self.inode_quota} files and directories)")
        return hits

    def release(self, run: RunDirs) -> None:
        """Remove a run's directories. Mounted: one lazy unmount each (instant, whatever
        is inside); otherwise a removal of the tree that no depth or mode stops."""
        for d in (run.work, run.tmp):
            if d is None:
                continue
            if run.mounted:
                _detach(d)
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
            else:
                remove_tree(d)

    def close(self) -> None:
        """Unmount everything in the area and remove it."""
        if not self.path:
            return
        try:
            for point in _mount_points_under(self.path):
                _detach(point)
            remove_tree(self.path)
        except OSError as exc:
            log.error("could not remove the sandbox run area %s: %s", self.path, exc)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
        self.path = ""


def reap_stale_areas(base: str) -> list[str]:
    """Remove the areas under `base` whose server is gone (their lock is free): the run
    directories of a killed server, with their mounts. Returns the removed paths."""
    removed: list[str] = []
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(AREA_PREFIX):
            continue
        path = os.path.join(base, name)
        try:
            fd = os.open(os.path.join(path, _LOCK_NAME), os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            # No lock yet: a server creating it this instant, or one that died at once.
            try:
                if time.time() - os.stat(path).st_mtime < _UNLOCKED_GRACE_S:
                    continue
            except OSError:
                continue
            fd = -1
        except OSError:
            continue
        try:
            if fd >= 0:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live server's
            for point in _mount_points_under(path):
                _detach(point)
            remove_tree(path)
            removed.append(path)
            log.warning("removed the sandbox run area %s left by a server that was killed", path)
        except OSError as exc:
            log.error("could not remove the stale sandbox run area %s: %s", path, exc)
        finally:
            if fd >= 0:
                os.close(fd)
    return removed
