"""The bwrap launcher: one bubblewrap process per run, started ahead of the run's files
and held, set up, at `--block-fd` while the runner confines it, optionally from a pool of
sandboxes pre-started ahead of requests (`sandbox.prespawn`).

bwrap unshares every namespace (no network, a private pid namespace whose init takes
every process of the run down with it, a private mount namespace where the system is
read-only and only the run directory and a capped /tmp are writable), runs the program
as uid/gid 65534 in a user namespace mapped to the unprivileged run user (run_area.py),
in a new session, with the syscall filter installed just before the exec, and dies with
the thread that started it. It is started with `--clearenv` and a minimal environment of
its own, since bwrap's environment is what `/proc/1/environ` shows inside. Limits are
applied without a `preexec_fn` (which makes CPython fork the whole server instead of
vfork+exec): bwrap reports its init's pid on `--info-fd`, the launcher sets the rlimits
on that pid with prlimit(2) (as the run user, bwrap sets them on itself first through
util-linux's prlimit) and moves it into the run's cgroups (under v1 the spawner
thread joins them before it starts bwrap: spawn.py), then writes the program file and
releases the init; should the server die before the release, the init reads EOF and
finds no program."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import resource
import shutil
from dataclasses import dataclass
from typing import Optional, Sequence

from .. import syscall_filter
from ..isolation.cgroups import write_control_file
from ..isolation.layout import (
    SANDBOX_ENV,
    SANDBOX_GID,
    SANDBOX_UID,
    SANDBOX_WORKDIR,
    Runtime,
    launcher_env,
    open_etc_copies,
    root_layout,
)
from ..isolation.process import limits_exec_prefix
from ..isolation.rlimits import Limits, rlimit_pairs
from ..protocol import RunCodeResponse
from ..timings import Timings
from .base import Launch, Launcher

log = logging.getLogger(__name__)

_SETUP_TIMEOUT_S = 30.0  # bwrap reports its init's pid within ms; this only bounds a hang


def bwrap_path() -> Optional[str]:
    return shutil.which("bwrap")


_BWRAP_LAYOUT_FLAGS = {"B": "--ro-bind", "S": "--symlink"}


@functools.lru_cache(maxsize=16)
def _bwrap_system_args(runtime: Runtime) -> tuple[str, ...]:
    """`root_layout` as bwrap options, computed once per runtime (the host layout does
    not change while the server runs). File copies ("F") go by fd: `open_etc_copies`."""
    return tuple(
        arg
        for kind, a, b in root_layout((runtime,))
        if kind in _BWRAP_LAYOUT_FLAGS
        for arg in (_BWRAP_LAYOUT_FLAGS[kind], a, b)
    )


def build_bwrap_argv(
    bwrap: str,
    run_dir: str,
    command: list[str],
    runtime: Runtime,
    tmpfs_size_mb: int,
    *,
    tmp_dir: Optional[str] = None,
    info_fd: Optional[int] = None,
    block_fd: Optional[int] = None,
    status_fd: Optional[int] = None,
    seccomp_fd: Optional[int] = None,
    etc_copies: Sequence[tuple[int, str]] = (),
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The bubblewrap command line for one run (see the module docstring for why).

    `tmp_dir`: a host directory (the run area's capped tmpfs) bound at /tmp; without
    it /tmp is a tmpfs of `tmpfs_size_mb` (bwrap cannot cap its inodes).
    `info_fd`/`block_fd`: bwrap writes the sandbox init's pid to `info_fd` and, once the
    sandbox is set up, waits for a byte on `block_fd` before it starts the program; the
    runner applies rlimits and cgroups in between (`confine_blocked_child`).
    `status_fd`: bwrap's `--json-status-fd`, where it writes `{"exit-code": N}` once the
    program it started has exited, and nothing of the kind when the sandbox failed
    before the program ran (a bind it could not make, a runtime it could not exec): the
    program's exit 1 and bwrap's own are told apart by it (`BwrapLaunch.after_exit`).
    `seccomp_fd`: the syscall filter (classic BPF) bwrap installs just before the exec.
    `extra_args`: more bwrap options (binds, environment) a launch of a command other than
    a program file adds (a harness: piexp.harness.pi.sandbox), placed before the root is
    made read-only."""
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",  # explicit: --unshare-all only *tries*, and --disable-userns needs it
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *[arg for name, value in SANDBOX_ENV.items() for arg in ("--setenv", name, value)],
        *_bwrap_system_args(runtime),
        *[arg for fd, path in etc_copies for arg in ("--perms", "0444", "--file", str(fd), path)],
        # bwrap's --proc covers /proc/sys, sysrq-trigger, irq and bus read-only.
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *(("--bind", tmp_dir, "/tmp") if tmp_dir else ("--size", str(tmpfs_size_mb << 20), "--tmpfs", "/tmp")),
        "--bind",
        run_dir,
        SANDBOX_WORKDIR,
        *extra_args,
        # bwrap's root is a tmpfs holding the mount points (/etc, /sandbox, ...): make it
        # read-only too, so /, /etc etc. are not scratch space; /tmp and the run dir are
        # separate mounts and stay writable.
        "--remount-ro",
        "/",
        "--chdir",
        SANDBOX_WORKDIR,
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
        "--disable-userns",
    ]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--", *command]
    return argv


def confine_blocked_child(pid: int, limits: Limits, cgroup_dirs: list[str], *, rlimits: bool = True) -> None:
    """Apply the run's rlimits and cgroups to bwrap's sandbox init `pid` while it is held
    at `--block-fd` (set up, but before it forks the program): everything the program
    ever starts descends from it after this point, so nothing escapes the limits.

    This replaces a `preexec_fn`, which forces CPython to fork() the (large) server
    process and run Python code in the child instead of vfork()+exec (~4-5 ms a run).
    Side effect where the init joins its cgroups here (cgroup v2): the sandbox's cgroup
    namespace is rooted at the server's cgroup rather than the run's, so
    `/proc/self/cgroup` inside shows `/piexp-sandbox-<pid>/run-<n>` instead of `/`."""
    for d in cgroup_dirs:
        write_control_file(os.path.join(d, "cgroup.procs"), str(pid))
    for res, pair in rlimit_pairs(limits) if rlimits else ():
        resource.prlimit(pid, res, pair)


async def _wait_readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)


async def _read_child_pid(fd: int) -> Optional[int]:
    """Read bwrap's `--info-fd` JSON to EOF without blocking the loop; the init's pid,
    or None when bwrap exited before reporting one."""
    buf = bytearray()
    while True:
        chunk, ended = _read_available(fd)
        buf.extend(chunk)
        if ended:
            break
        await _wait_readable(fd)
    try:
        pid = json.loads(bytes(buf).decode() or "{}").get("child-pid")
    except ValueError:
        return None
    return int(pid) if isinstance(pid, int) and pid > 0 else None


def _read_available(fd: int) -> tuple[bytes, bool]:
    """What the pipe `fd` holds now, without waiting for more, and whether its writers are
    all gone (EOF)."""
    os.set_blocking(fd, False)
    buf = bytearray()
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return bytes(buf), False
        if not chunk:
            return bytes(buf), True
        buf.extend(chunk)


def _reap(pidfd: int, child: int | None) -> None:
    os.close(pidfd)
    try:
        if child is not None:
            os.waitpid(child, os.WNOHANG)
    except ChildProcessError:
        pass  # not reparented to us (not a subreaper): init reaps it


_exiting: set[asyncio.Task] = set()  # reapers of sandbox inits still exiting


def _reap_later(pidfd: int, child: int | None) -> None:
    async def reap() -> None:
        try:
            await _wait_readable(pidfd)
        finally:
            _reap(pidfd, child)

    task = asyncio.get_running_loop().create_task(reap())
    _exiting.add(task)
    task.add_done_callback(_exiting.discard)


@dataclass(eq=False)
class BwrapLaunch(Launch):
    """A bwrap sandbox, held at --block-fd from preparation until `release`."""

    child: Optional[int] = None  # the sandbox init's pid (as seen here)
    pidfd: Optional[int] = None  # a pidfd of the init, to wait for its namespace's end
    block_w: Optional[int] = None  # the write end of bwrap's --block-fd
    status_r: Optional[int] = None  # the read end of bwrap's --json-status-fd
    # Whether this server may change the held init's rlimits (not one started as the
    # run user: only its own uid or CAP_SYS_RESOURCE may).
    limits_settable: bool = True

    @property
    def ready(self) -> bool:
        """Started, confined, and still alive: fit to run a program."""
        return self.error is None and self.child is not None and self.proc is not None and self.proc.returncode is None

    async def start(self, limits: Limits, timeout: float) -> None:
        if self.error is None and self.child is not None and limits != self.limits and self.limits_settable:
            # A pre-started sandbox: this request's CPU time limit. (One started as the
            # run user keeps the largest CPU limit; the wall-time kill still ends it on time.)
            try:
                confine_blocked_child(self.child, limits, [])
            except OSError as exc:
                self.error = f"could not apply the run's limits: {exc}"

    def after_exit(self) -> None:
        if self.child is None and self.error is None:
            # bwrap exited before it made the sandbox (a bind it could not make, a namespace
            # it may not create; its stderr says which): the sandbox's failure, which must
            # not read as the program's own exit.
            self.error = "could not set up the sandbox: bwrap exited before starting it"
        elif self.error is None and self.status_r is not None and self.proc is not None:
            # bwrap exited by itself (not killed here: a time limit's kill leaves -9) and
            # reported no program exit: its init failed after reporting its pid, while it
            # made the binds or exec'd the runtime, which a release byte already written
            # does not show. The sandbox's failure, never the program's exit 1.
            code = self.proc.returncode
            # bwrap, reaped, has written all it will; a process of the sandbox may still
            # hold the write end, so read what is there rather than to EOF.
            status, _ = _read_available(self.status_r)
            if code is not None and code >= 0 and b'"exit-code"' not in status:
                self.error = "could not set up the sandbox: bwrap exited before the program ran"

    def release(self) -> None:
        if self.block_w is not None:
            if self.error is None and self.child is not None:
                try:
                    os.write(self.block_w, b"1")  # let the init start the program
                except BrokenPipeError:
                    # The init exited while bwrap set the sandbox up (a bind it could not make).
                    self.error = "could not set up the sandbox: its init exited before the program started"
            os.close(self.block_w)
            self.block_w = None

    async def close(self) -> None:
        """Also waits for the sandbox's init (and so its whole pid namespace) to be gone,
        and reaps it (the server is a child subreaper), so the cgroups are empty at once."""
        if self.block_w is not None:
            os.close(self.block_w)  # an unreleased init reads EOF: no program file, it exits
            self.block_w = None
        if self.status_r is not None:
            os.close(self.status_r)
            self.status_r = None
        await super().close()
        if self.pidfd is not None:
            pidfd, self.pidfd = self.pidfd, None
            try:
                async with asyncio.timeout(5):
                    await _wait_readable(pidfd)
            except TimeoutError:
                # A namespace with thousands of processes to kill (a fork bomb) on a busy
                # machine can take longer: the init is still reaped when it goes, so no
                # zombie of it outlives the run; the caller goes on meanwhile.
                log.warning("sandbox init %s is still exiting after 5 s; reaping it when it does", self.child)
                _reap_later(pidfd, self.child)
                return
            _reap(pidfd, self.child)


class BwrapLauncher(Launcher):
    """Starts a bwrap per run, and keeps `settings.prespawn` of them started per language."""

    name = "bwrap"

    def __init__(self, host, bwrap: str) -> None:
        super().__init__(host)
        self.bwrap = bwrap  # the bwrap binary
        self._pool: dict[str, list[BwrapLaunch]] = {}  # language -> pre-started sandboxes
        self._filling: dict[str, int] = {}  # language -> pre-starts under way
        self._background: set[asyncio.Task] = set()
        self._closed = False

    def _new_launch(self, **fields) -> BwrapLaunch:
        return BwrapLaunch(**fields, limits_settable=self.host.spawner.user is None)

    async def _hold(self, launch: Launch, runtime: Runtime, t: Timings) -> None:
        """Start bwrap and wait until its init is held at --block-fd, then confine the
        init (cgroups, rlimits). No program file exists yet."""
        assert isinstance(launch, BwrapLaunch) and launch.run is not None  # made by _new_launch, not released
        host, s, cgroups = self.host, self.host.settings, self.host.cgroups
        spawner = host.spawner
        limits = launch.limits
        # No preexec_fn: CPython then spawns with vfork+exec (fork+exec as the run user,
        # with no Python in the child). Limits (and cgroups that the spawner thread could
        # not join) are applied to the sandbox's init while bwrap holds it at --block-fd.
        info_r, info_w = os.pipe()
        block_r, launch.block_w = os.pipe()
        launch.status_r, status_w = os.pipe()
        etc_copies = open_etc_copies()
        seccomp_fd = syscall_filter.filter_fd()
        try:
            argv = build_bwrap_argv(
                self.bwrap,
                launch.run.work,
                launch.command,
                runtime,
                s.tmpfs_size_mb,
                tmp_dir=launch.run.tmp,
                info_fd=info_w,
                block_fd=block_r,
                status_fd=status_w,
                seccomp_fd=seccomp_fd,
                etc_copies=etc_copies,
                extra_args=launch.extra_args,
            )
            if spawner.user:
                # As the run user, bwrap gets the rlimits before its exec, from programs it
                # execs first: the server may lack CAP_SYS_RESOURCE to set them on another
                # uid's process, and a preexec_fn can deadlock the child of a threaded
                # process (process.limits_exec_prefix).
                argv = [*limits_exec_prefix(limits), *argv]
            attach_later = cgroups.joined_dirs(launch.cgroup_dirs) if cgroups and launch.cgroup_dirs else []
            join_now: list[str] = []
            if cgroups and attach_later and cgroups.joins_per_thread:  # a v2 join would move the whole server
                join_now = cgroups.self_join_files(launch.cgroup_dirs)
            try:
                launch.proc = await spawner.spawn(
                    argv,
                    env=launcher_env(),
                    pass_fds=(info_w, block_r, status_w, seccomp_fd, *(fd for fd, _ in etc_copies)),
                    stdin_pipe=launch.stdin_pipe,
                    join_tasks=join_now,
                    as_run_user=True,
                )
                if launch.proc.joined_cgroups:
                    attach_later = []
            finally:
                os.close(info_w)
                os.close(block_r)
                os.close(status_w)
                os.close(seccomp_fd)
                for fd, _ in etc_copies:
                    os.close(fd)
            t.mark("spawn")
            try:
                # asyncio.timeout, not wait_for: no extra task on the per-run path.
                async with asyncio.timeout(_SETUP_TIMEOUT_S):
                    launch.child = await _read_child_pid(info_r)
                t.mark("bwrap")
            except TimeoutError:
                launch.error = "the sandbox did not start in time"
        finally:
            os.close(info_r)
        if launch.child is not None:
            try:
                launch.pidfd = os.pidfd_open(launch.child)
            except (AttributeError, OSError):
                launch.pidfd = None
            try:
                confine_blocked_child(launch.child, limits, attach_later, rlimits=spawner.user is None)
            except OSError as exc:
                # Never release a sandbox we could not confine.
                launch.error = f"could not apply the run's limits: {exc}"
        # else bwrap failed before it cloned (its stderr says why) or timed out.
        t.mark("confine")

    # ------------------------------------------------------------------ the prespawn pool

    def take_prepared(self, language: str, memory_mb: int) -> Optional[BwrapLaunch]:
        """A pre-started sandbox for `language` (default memory limit only, since node's
        command line depends on it), and start its replacement in the background."""
        s = self.host.settings
        if s.prespawn <= 0 or memory_mb != s.default_memory_limit_mb:
            return None
        pool = self._pool.setdefault(language, [])
        launch = None
        while pool:
            candidate = pool.pop(0)
            if candidate.ready:
                launch = candidate
                break
            self._spawn_background(self.dispose(candidate))
        self._refill(language)
        return launch

    def _refill(self, language: str) -> None:
        want = self.host.settings.prespawn - len(self._pool.get(language, [])) - self._filling.get(language, 0)
        for _ in range(max(0, want)):
            self._filling[language] = self._filling.get(language, 0) + 1
            self._spawn_background(self._prespawn_one(language))

    async def _prespawn_one(self, language: str) -> None:
        try:
            runtime = self.host.runtimes.get(language)
            if runtime is None or self._closed:
                return
            s = self.host.settings
            # The largest CPU limit any request can get: the request's own is set at
            # release, and lowering a hard limit needs no privilege (raising needs
            # CAP_SYS_RESOURCE, which a server in a container may well lack).
            cpu = s.cpu_time_s if s.cpu_time_s is not None else s.max_run_timeout_s + 1
            launch = await self.prepare(
                language, runtime, s.default_memory_limit_mb, max(1, math.ceil(cpu)), True, Timings()
            )
            if isinstance(launch, RunCodeResponse):
                return
            assert isinstance(launch, BwrapLaunch)
            if self._closed or not launch.ready or not launch.pooled:
                await self.dispose(launch)
                return
            self._pool.setdefault(language, []).append(launch)
        except Exception:  # noqa: BLE001 - a failed pre-start only costs a cold start
            log.exception("could not pre-start a %s sandbox", language)
        finally:
            self._filling[language] -= 1

    def _spawn_background(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        self._closed = True
        for task in list(self._background):
            try:
                await task
            except Exception:  # noqa: BLE001
                pass
        for pool in self._pool.values():
            while pool:
                await self.dispose(pool.pop())
        self.close()
