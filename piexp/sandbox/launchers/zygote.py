"""The zygote launcher: runs start through one long-lived process (zygote.c, driven by
zygote_client.py) that built the sandbox's read-only root once, instead of a bwrap each.
A run is prepared (run dir, cgroups) ahead of its files and started once they are
written: its init joins the run's cgroups, sets up its namespaces and starts the
program. A zygote that stops answering is replaced once; when no zygote can be started,
runs start with a bwrap each (same isolation, more CPU a run)."""

from __future__ import annotations

import functools
import logging
import math
import os
from dataclasses import dataclass
from typing import Optional, Union

from .. import syscall_filter
from ..isolation.layout import SANDBOX_ENV, Runtime, root_layout
from ..isolation.process import kill_process_group
from ..isolation.rlimits import Limits, rlimit_pairs
from ..protocol import RunCodeResponse, sandbox_error
from ..run_area import RunDirs
from ..spawn import SpawnedChild, adopt, reap_pid
from ..timings import Timings
from .base import Host, Launch, Launcher, StartFailed
from .bwrap import BwrapLauncher
from .zygote_client import RunRequest, TmpSpec, Zygote, ZygoteError, ZygoteRefusal, setup_failure, zygote_binary

log = logging.getLogger(__name__)


@dataclass(eq=False)
class ZygoteLaunch(Launch):
    """A prepared run the zygote starts once its files are written."""

    launcher: Optional["ZygoteLauncher"] = None
    status_r: Optional[int] = None  # the run's status pipe: why its init gave up, if it did

    async def start(self, limits: Limits, timeout: float) -> None:
        assert self.launcher is not None  # set by the launcher that made this launch
        try:
            self.proc = await self.launcher.spawn_run(self, limits, timeout)
        except OSError as exc:  # ZygoteError included
            raise StartFailed(sandbox_error(f"could not start the sandbox: {exc}")) from exc

    def after_exit(self) -> None:
        if self.status_r is not None:
            why = setup_failure(self.status_r)
            self.error = f"could not set up the sandbox: {why}" if why else None

    async def close(self) -> None:
        if self.status_r is not None:
            os.close(self.status_r)
            self.status_r = None
        await super().close()


class ZygoteLauncher(Launcher):
    """Starts runs through the zygote; `fallback` prepares runs when none is running."""

    name = "zygote"

    def __init__(self, host: Host, zygote: Zygote, fallback: BwrapLauncher) -> None:
        super().__init__(host)
        self.zygote: Optional[Zygote] = zygote
        self.fallback = fallback

    @classmethod
    def start(cls, host: Host, fallback: BwrapLauncher) -> Optional["ZygoteLauncher"]:
        """The launcher with a started, checked zygote; None (with a warning saying why)
        when no zygote can be used."""
        zygote = _start_zygote(host)
        return cls(host, zygote, fallback) if zygote is not None else None

    def _new_launch(self, **fields) -> ZygoteLaunch:
        return ZygoteLaunch(**fields, launcher=self)

    async def _hold(self, launch: Launch, runtime: Runtime, t: Timings) -> None:
        """Nothing starts before the files: the run's init is confined before its program runs."""

    async def prepare(
        self,
        language: str,
        runtime: Runtime,
        memory_mb: int,
        cpu_time_s: int,
        stdin_pipe: bool,
        t: Timings,
        *,
        command: Optional[tuple[list[str], Limits]] = None,
        extra_args: tuple[str, ...] = (),
    ) -> Union[Launch, RunCodeResponse]:
        # A command other than a program file (with its own binds) goes to bwrap: the
        # zygote's root layout is fixed when it starts.
        if self.zygote is None or command is not None:  # or: it failed and no new one started
            return await self.fallback.prepare(
                language, runtime, memory_mb, cpu_time_s, stdin_pipe, t, command=command, extra_args=extra_args
            )
        return await super().prepare(language, runtime, memory_mb, cpu_time_s, stdin_pipe, t)

    def _restart(self, failure: Exception) -> bool:
        """Replace a zygote that stopped answering; False (later runs then start with a
        bwrap each) when a new one cannot be started either."""
        log.error("the sandbox zygote failed (%s); starting a new one", failure)
        if self.zygote is not None:
            self.zygote.close()
        self.zygote = _start_zygote(self.host)
        return self.zygote is not None

    async def spawn_run(self, launch: ZygoteLaunch, limits: Limits, timeout: float) -> SpawnedChild:
        """Start the run's program (its files are written); a zygote that died is
        replaced once. Raises OSError (ZygoteError included) when it cannot start."""
        if self.zygote is None:
            raise ZygoteError("the sandbox zygote is gone and no new one could be started")
        try:
            return await self._spawn(launch, limits, timeout)
        except ZygoteRefusal:
            raise
        except ZygoteError as exc:
            # The zygote died (killed from outside?): a new one, once, then the run.
            if not self._restart(exc):
                raise
            return await self._spawn(launch, limits, timeout)

    async def _spawn(self, launch: ZygoteLaunch, limits: Limits, timeout: float) -> SpawnedChild:
        """Its init joins the run's cgroups, sets up its namespaces and starts the program."""
        assert self.zygote is not None and launch.run is not None  # a started zygote; a prepared run
        run = launch.run
        opened: list[int] = []
        ours: list = []
        try:
            status_r, status_w = os.pipe2(os.O_CLOEXEC)
            launch.status_r = status_r
            opened.append(status_w)
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            ours.append(open(out_r, "rb", buffering=0))
            opened.append(out_w)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            ours.append(open(err_r, "rb", buffering=0))
            opened.append(err_w)
            if launch.stdin_pipe:
                in_r, in_w = os.pipe2(os.O_CLOEXEC)
                ours.append(open(in_w, "wb", buffering=0))
            else:
                in_r = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            opened.append(in_r)
            joins = _open_cgroup_joins(self.host, launch.cgroup_dirs)
            opened += joins
            # The init's own alarm is a backstop behind the server's timer (if the server
            # is gone, PR_SET_PDEATHSIG already took the run down).
            pid = await self.zygote.spawn(
                RunRequest(
                    run.name,
                    launch.command,
                    SANDBOX_ENV,
                    rlimit_pairs(limits),
                    _tmp_spec(self.host, run),
                    math.ceil(timeout) + 10,
                    [in_r, out_w, err_w, status_w, *joins],
                )
            )
        except BaseException:
            for f in ours:
                f.close()
            if launch.status_r is not None:
                os.close(launch.status_r)
                launch.status_r = None
            raise
        finally:
            for fd in opened:
                os.close(fd)  # the run has its own copies now
        stdin = ours[2] if launch.stdin_pipe else None
        try:
            child = await adopt(pid, functools.partial(reap_pid, pid), ours[0], ours[1], stdin, group_outlives_it=False)
        except BaseException:
            kill_process_group(pid)
            reap_pid(pid)
            for f in ours:
                f.close()
            raise
        child.joined_cgroups = bool(launch.cgroup_dirs)
        return child

    async def aclose(self) -> None:
        await self.fallback.aclose()
        self.close()

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None
        self.fallback.close()


def _tmp_spec(host: Host, run: RunDirs) -> TmpSpec:
    """A zygote run's /tmp: the run area's capped tmpfs, else one of its own."""
    s = host.settings
    return TmpSpec(run.tmp_name or "", s.tmpfs_size_mb << 20, s.inode_quota)


def _open_cgroup_joins(host: Host, cgroup_dirs: list[str]) -> list[int]:
    """Write-only fds of the files a zygote run's init writes "0" to, to join its
    cgroups (and the shared cpu one): opened here, with the server's permissions."""
    if not cgroup_dirs:
        return []
    assert host.cgroups is not None  # run cgroups exist only where a limiter made them
    fds: list[int] = []
    try:
        for path in host.cgroups.self_join_files(cgroup_dirs):
            fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _start_zygote(host: Host) -> Optional[Zygote]:
    """The zygote, checked with one real run (cgroups joined, /usr/bin/true run);
    None, with a warning saying why, when it cannot be used: runs then start with a
    bwrap each (same isolation, more CPU a run)."""
    layout = root_layout(r for r in host.runtimes.values() if r is not None)
    zygote = None
    try:
        filter_fd = syscall_filter.filter_fd()
        try:
            zygote = Zygote.start(
                host.area.path,
                layout,
                filter_fd=filter_fd,
                user=host.run_user,
                binary=host.area.reachable_copy(zygote_binary()),
            )
        finally:
            os.close(filter_fd)
        _check(host, zygote)
        return zygote
    except (ZygoteError, OSError) as exc:
        if zygote is not None:
            zygote.close()
        log.warning("sandbox zygote unavailable, starting a bwrap per run instead: %s", exc)
        return None


def _check(host: Host, zygote: Zygote) -> None:
    """One real run through a new zygote: its cgroups joined, /usr/bin/true run."""
    run = host.area.new_run()
    cgroup_dirs: list[str] = []
    opened: list[int] = []
    try:
        if host.cgroups is not None:
            cgroup_dirs = host.cgroups.create(64 << 20, 8)
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        opened.append(null)
        joins = _open_cgroup_joins(host, cgroup_dirs)
        opened += joins
        limits = Limits(cpu_time_s=5, file_size_bytes=1 << 20, open_files=64, processes=8)
        code, why = zygote.run_blocking(
            run.name,
            ["/usr/bin/true"],
            [null, null, null],
            tmp=_tmp_spec(host, run),
            rlimits=rlimit_pairs(limits),
            wall_s=5,
            joins=joins,
        )
        if code != 0 or why:
            raise ZygoteError(f"its check run failed (exit {code}): {why or 'no reason given'}")
    finally:
        for fd in opened:
            os.close(fd)
        if cgroup_dirs and host.cgroups is not None:
            host.cgroups.remove(cgroup_dirs)
        host.area.release(run)
