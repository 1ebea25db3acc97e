"""Run one `/run_code` request: a fresh run directory, the files written safely, the
program spawned under isolation, its output drained and capped, the time limit enforced,
requested files fetched back, and everything removed afterwards."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import errno
import functools
import json
import logging
import math
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

from . import isolation
from .protocol import (
    LANGUAGES,
    CommandRunResult,
    CommandRunStatus,
    RunCodeRequest,
    RunCodeResponse,
    RunStatus,
    sandbox_error,
)
from . import syscall_filter
from .run_area import RunArea, RunDirs, RunUser
from .run_dir import UnsafePathError, read_file, safe_relative_path, write_file
from .settings import SandboxSettings
from .spawn import SpawnedChild, Spawner, adopt, reap_pid
from .zygote import TmpSpec, Zygote, ZygoteError, ZygoteRefusal, setup_failure, zygote_binary

log = logging.getLogger(__name__)


async def _drain(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    """Read a pipe to EOF, keeping the first `cap` bytes and discarding the rest, so a
    flood never fills the pipe and stalls the program into a false time-out."""
    kept = bytearray()
    total = 0
    while True:
        chunk = await stream.read(1 << 16)
        if not chunk:
            break
        total += len(chunk)
        room = cap - len(kept)
        if room > 0:
            kept += chunk[:room]
    return bytes(kept), total


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class Timings:
    """perf_counter spans (ms) of one request, in the order they were marked; each span
    runs from the previous mark. Sent back as a `Server-Timing` header by the server."""

    __slots__ = ("spans", "_last")

    def __init__(self) -> None:
        self.spans: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.spans[name] = self.spans.get(name, 0.0) + (now - self._last) * 1e3
        self._last = now

    def header(self) -> str:
        return ", ".join(f"{k};dur={v:.3f}" for k, v in self.spans.items())


async def _read_child_pid(fd: int) -> Optional[int]:
    """Read bwrap's `--info-fd` JSON to EOF without blocking the loop; the init's pid,
    or None when bwrap exited before reporting one."""
    os.set_blocking(fd, False)
    buf = bytearray()
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            await _wait_readable(fd)
            continue
        if not chunk:
            break
        buf.extend(chunk)
    try:
        pid = json.loads(bytes(buf).decode() or "{}").get("child-pid")
    except ValueError:
        return None
    return int(pid) if isinstance(pid, int) and pid > 0 else None


_SETUP_TIMEOUT_S = 30.0  # bwrap reports its init's pid within ms; this only bounds a hang


@dataclass(eq=False)
class _Held:
    """One sandbox from start to disposal: its run dir and cgroups, and bwrap held at
    --block-fd (or, with the zygote or unisolated, the command to start at release)."""

    run: Optional[RunDirs]
    limits: isolation.Limits
    language: str
    memory_mb: int
    stdin_pipe: bool
    cgroup_dirs: list[str] = field(default_factory=list)
    proc: Optional[SpawnedChild] = None
    child: Optional[int] = None  # the sandbox init's pid (as seen here)
    pidfd: int = -1
    block_w: int = -1
    error: Optional[str] = None
    pooled: bool = True
    command: Optional[list[str]] = None  # zygote or unisolated: started at release
    status_r: int = -1  # zygote: the run's status pipe (why its init gave up, if it did)

    @property
    def run_dir(self) -> str:
        return self.run.work if self.run is not None else ""


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


async def _kill_and_reap(proc: SpawnedChild) -> None:
    """SIGKILL the sandbox's process group (bwrap, or a zygote run's init, leads its own
    session) and reap its leader."""
    proc.kill()
    if proc.returncode is None:
        try:
            async with asyncio.timeout(5):
                await proc.wait()
        except TimeoutError:  # pragma: no cover
            log.error("sandbox pid %d did not die after SIGKILL", proc.pid)


@dataclass
class Runner:
    """Runs requests under the given settings. Holds the resolved runtimes, the bwrap
    binary, the optional cgroup limiter, and a pool of slots bounding concurrency."""

    settings: SandboxSettings
    area: RunArea  # where run directories live, owned by the run user
    bwrap: Optional[str] = None
    cgroups: Optional[isolation.CgroupLimiter] = None
    runtimes: dict[str, Optional[isolation.Runtime]] = field(default_factory=dict)
    spawner: Spawner = field(default_factory=lambda: Spawner(None))
    zygote: Optional[Zygote] = None  # starts isolated runs when set; else a bwrap per run
    seccomp: Optional[bytes] = None  # the runs' syscall filter (classic BPF); None only unisolated
    _pool: dict[str, list[_Held]] = field(default_factory=dict)  # pre-started sandboxes
    _filling: dict[str, int] = field(default_factory=dict)
    _background: set = field(default_factory=set)
    _closed: bool = False

    @classmethod
    def create(cls, settings: SandboxSettings) -> "Runner":
        bwrap = isolation.bwrap_path()
        if bwrap is None and not settings.allow_unisolated:
            raise RuntimeError(
                "bubblewrap (bwrap) is not on PATH, so programs cannot be isolated; install it "
                "(apt-get install bubblewrap) or set sandbox.allow_unisolated=true to run them unisolated"
            )
        if bwrap is None:
            log.warning(
                "SANDBOX IS UNISOLATED: bubblewrap is missing and allow_unisolated is set; "
                "model-written programs run with this server's privileges and filesystem"
            )
        if settings.prespawn and settings.launcher == "zygote":
            raise RuntimeError(
                "prespawn holds bwrap sandboxes started ahead of requests, and the zygote launcher "
                "starts none: set launcher=bwrap to use prespawn"
            )
        seccomp = None
        if bwrap is not None:
            try:
                seccomp = syscall_filter.filter_bpf()
            except syscall_filter.SyscallFilterError as exc:
                raise RuntimeError(f"{exc}; the sandbox does not run programs without its syscall filter") from exc
        user = RunUser.for_server(settings.run_uid, settings.run_gid)
        area = RunArea.create(settings.work_dir, user, disk_quota_bytes=settings.disk_quota_mb << 20,
                              tmp_bytes=settings.tmpfs_size_mb << 20, inode_quota=settings.inode_quota)
        cgroups = isolation.CgroupLimiter.detect() if settings.use_cgroups else None
        if bwrap is not None:
            # A sandbox's init outlives the outer bwrap by a moment; as a subreaper this
            # process reaps it itself (see `_dispose`), instead of waiting for the host's
            # init to, before the run's cgroups can be removed.
            isolation.set_child_subreaper()
        runtimes = {lang: isolation.resolve_runtime(spec.binary) for lang, spec in LANGUAGES.items()}
        try:
            # A runtime the run user cannot reach (a pyenv under a 0700 /root) is bound
            # from a read-only view of it in the run area.
            runtimes = {lang: rt and dataclasses.replace(rt, bind_source=rt.bind_prefix and area.view_of(rt.bind_prefix))
                        for lang, rt in runtimes.items()}
        except OSError as exc:
            area.close()
            raise RuntimeError(f"could not make the runtimes reachable for the run user (uid {user.uid}): {exc}") from exc
        spawner = Spawner(cgroups.home_tasks if cgroups is not None else None,
                          user=(user.uid, user.gid) if user.switched else None)
        runner = cls(settings=settings, area=area, bwrap=bwrap, cgroups=cgroups, runtimes=runtimes, spawner=spawner,
                     seccomp=seccomp)
        if bwrap is not None and settings.launcher == "zygote":
            runner.zygote = runner._start_zygote()
        log.info(
            "sandbox runner: launcher=%s cgroups=%s prespawn=%d run uid/gid=%d/%d%s quotas=%s runtimes=%s",
            "zygote" if runner.zygote else bwrap, cgroups.kind if cgroups else None, settings.prespawn,
            user.uid, user.gid, " (the server's own)" if not user.switched else "",
            "per-run tmpfs" if area.mounts else "none for the run dir (the server cannot mount)",
            {k: (v.binary if v else None) for k, v in runtimes.items()},
        )
        return runner

    def _start_zygote(self) -> Optional[Zygote]:
        """The zygote, checked with one real run (cgroups joined, /usr/bin/true run);
        None, with a warning saying why, when it cannot be used: runs then start with a
        bwrap each (same isolation, ~3 ms more CPU a run)."""
        layout = isolation.root_layout(r for r in self.runtimes.values() if r is not None)
        zygote = None
        user = self.area.user
        try:
            filter_fd = syscall_filter.filter_fd()
            try:
                zygote = Zygote.start(self.area.path, layout, filter_fd=filter_fd,
                                      user=(user.uid, user.gid) if user.switched else None,
                                      binary=self.area.reachable_copy(zygote_binary()))
            finally:
                os.close(filter_fd)
            self._check_zygote(zygote)
            return zygote
        except (ZygoteError, OSError) as exc:
            if zygote is not None:
                zygote.close()
            log.warning("sandbox zygote unavailable, starting a bwrap per run instead: %s", exc)
            return None

    def _restart_zygote(self, failure: Exception) -> bool:
        """Replace a zygote that stopped answering; False (later runs then start with a
        bwrap each) when a new one cannot be started either."""
        log.error("the sandbox zygote failed (%s); starting a new one", failure)
        self.zygote.close()
        self.zygote = self._start_zygote()
        return self.zygote is not None

    def _check_zygote(self, zygote: Zygote) -> None:
        run = self.area.new_run()
        cgroup_dirs: list[str] = []
        opened: list[int] = []
        try:
            if self.cgroups is not None:
                cgroup_dirs = self.cgroups.create(64 << 20, 8)
            null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            opened.append(null)
            joins = self._open_cgroup_joins(cgroup_dirs)
            opened += joins
            limits = isolation.Limits(cpu_time_s=5, file_size_bytes=1 << 20, open_files=64, processes=8)
            code, why = zygote.run_blocking(run.name, ["/usr/bin/true"], [null, null, null], tmp=self._tmp_spec(run),
                                            rlimits=isolation.rlimit_pairs(limits), wall_s=5, joins=joins)
            if code != 0 or why:
                raise ZygoteError(f"its check run failed (exit {code}): {why or 'no reason given'}")
        finally:
            for fd in opened:
                os.close(fd)
            if cgroup_dirs:
                self.cgroups.remove(cgroup_dirs)
            self.area.release(run)

    def _tmp_spec(self, run: RunDirs) -> TmpSpec:
        """A zygote run's /tmp: the run area's capped tmpfs, else one of its own."""
        s = self.settings
        return TmpSpec(run.tmp_name or "", s.tmpfs_size_mb << 20, s.inode_quota)

    def _open_cgroup_joins(self, cgroup_dirs: list[str]) -> list[int]:
        """Write-only fds of the files a zygote run's init writes "0" to, to join its
        cgroups (and the shared cpu one): opened here, with the server's permissions."""
        if not cgroup_dirs:
            return []
        fds: list[int] = []
        try:
            for path in self.cgroups.self_join_files(cgroup_dirs):
                fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None
        self.spawner.close()
        if self.cgroups is not None:
            self.cgroups.close()
        self.area.close()

    def _command(self, language: str, runtime: isolation.Runtime, memory_mb: int) -> tuple[list[str], isolation.Limits]:
        s = self.settings
        spec = LANGUAGES[language]
        cmd = [runtime.binary]
        as_bytes = data_bytes = None
        have_mem_cgroup = self.cgroups is not None and self.cgroups.limits_memory
        if language == "nodejs":
            if not have_mem_cgroup:
                # Without a cgroup, V8 sizes its heap from this flag so that a memory bomb
                # fails as a JS heap OOM (RLIMIT_AS would break node's reservations).
                # Under a cgroup no flag: any V8 flag costs node its code cache (see
                # isolation's docstring).
                cmd.append(f"--max-old-space-size={max(16, memory_mb * 3 // 4)}")
                data_bytes = memory_mb << 20
        elif language == "python":
            cmd.append("-B")  # no .pyc litter in the run dir
            if not have_mem_cgroup:
                as_bytes = memory_mb << 20
        else:
            if not have_mem_cgroup:
                data_bytes = memory_mb << 20
        cmd.append(spec.code_file)
        return cmd, isolation.Limits(
            cpu_time_s=0,  # filled by caller from the timeout
            file_size_bytes=s.max_file_size_mb << 20,
            open_files=s.max_open_files,
            # Per uid, so shared by every run of one user namespace: only where no pids
            # cgroup counts each run's processes exactly.
            processes=None if self.cgroups is not None and self.cgroups.limits_pids else s.max_processes,
            address_space_bytes=as_bytes,
            data_bytes=data_bytes,
        )

    async def run(self, req: RunCodeRequest, timings: Optional[Timings] = None) -> RunCodeResponse:
        """Run one request. `timings`, when given, receives a span per step (the server
        sends them back in a `Server-Timing` header)."""
        t = timings if timings is not None else Timings()
        s = self.settings
        spec = LANGUAGES[req.language]  # the server has checked the language already
        runtime = self.runtimes.get(req.language)
        if runtime is None:
            # SandboxFusion answers a missing runtime like a shell would.
            return RunCodeResponse(
                status=RunStatus.failed,
                run_result=CommandRunResult(
                    status=CommandRunStatus.finished, execution_time=0.0, return_code=127,
                    stdout="", stderr=f"{spec.binary}: command not found\n",
                ),
            )

        # Decode and validate every file before touching the disk.
        try:
            payload: dict[str, bytes] = {}
            for name, content in (req.files or {}).items():
                rel = safe_relative_path(name)
                if rel == spec.code_file:
                    raise UnsafePathError(f"file name {name!r} is reserved for the submitted code")
                payload[rel] = base64.b64decode(content or "", validate=True)
            fetch = [safe_relative_path(n) for n in req.fetch_files or []]
        except UnsafePathError as exc:
            return sandbox_error(f"refused: {exc}")
        except (binascii.Error, ValueError) as exc:
            return sandbox_error(f"refused: a file is not valid base64 ({exc})")
        payload[spec.code_file] = req.code.encode("utf-8", errors="surrogatepass")

        timeout = float(req.run_timeout) if req.run_timeout and req.run_timeout > 0 else 10.0
        timeout = min(timeout, s.max_run_timeout_s)
        memory_mb = req.memory_limit_MB if req.memory_limit_MB and req.memory_limit_MB > 0 else s.default_memory_limit_mb
        cpu = s.cpu_time_s if s.cpu_time_s is not None else timeout + 1
        t.mark("parse")

        held = self._take_prespawned(req.language, memory_mb)
        if held is not None:
            limits = dataclasses.replace(held.limits, cpu_time_s=max(1, math.ceil(cpu)))
            t.mark("prespawned")
        else:
            command, limits = self._command(req.language, runtime, memory_mb)
            limits = dataclasses.replace(limits, cpu_time_s=max(1, math.ceil(cpu)))
            held = await self._prepare(req.language, runtime, command, limits, memory_mb, req.stdin is not None, t)
            if isinstance(held, RunCodeResponse):
                return held
            limits = held.limits
        try:
            result = await self._execute(held, payload, limits, req.stdin, timeout, t)
            if isinstance(result, RunCodeResponse):
                return result
            files: dict[str, str] = {}
            budget = s.max_fetch_total_mb << 20
            left_out = []
            for rel in fetch:
                data = read_file(held.run_dir, rel, s.fetch_file_cap_bytes)
                if data is None:
                    continue
                if len(data) > budget:
                    left_out.append(rel)
                    continue
                budget -= len(data)
                files[rel] = base64.b64encode(data).decode("ascii")
            ok = result.status == CommandRunStatus.finished and result.return_code == 0
            note = (f"left out, past max_fetch_total_mb ({s.max_fetch_total_mb} MB of fetched files in all): "
                    f"{', '.join(left_out)}" if left_out else "")
            return RunCodeResponse(
                status=RunStatus.success if ok else RunStatus.failed,
                message=note,
                run_result=result,
                files=files,
            )
        finally:
            t.mark("fetch")
            # Shielded: a second cancellation (server shutdown after the client hung up)
            # must not stop the kill and removal halfway.
            await asyncio.shield(self._dispose(held))
            t.mark("cleanup")

    def _command_without_cgroup(self, language, runtime, memory_mb):
        saved, self.cgroups = self.cgroups, None
        try:
            return self._command(language, runtime, memory_mb)
        finally:
            self.cgroups = saved

    # ------------------------------------------------------------------ held sandboxes

    async def _prepare(self, language, runtime, command, limits, memory_mb, stdin_pipe, t: Timings):
        """Create the run dir and cgroups, start bwrap and wait until its init is held
        at --block-fd, then confine the init (cgroups, rlimits). No program file exists
        yet: should this server die before the release, the init reads EOF on the block
        fd and its program fails to start for want of a file. Returns a `_Held`, or a
        SandboxError response."""
        s = self.settings
        try:
            run = self.area.new_run()
        except OSError as exc:
            return sandbox_error(f"could not create the run's directories: {exc}")
        held = _Held(run=run, limits=limits, language=language, memory_mb=memory_mb, stdin_pipe=stdin_pipe)
        try:
            if self.cgroups is not None:
                try:
                    held.cgroup_dirs = self.cgroups.create(memory_mb << 20, s.max_processes)
                except OSError as exc:
                    log.warning("could not create a cgroup for a run (%s); rlimits only", exc)
                    if self.cgroups.limits_memory:
                        command, limits2 = self._command_without_cgroup(language, runtime, memory_mb)
                        held.limits = limits = dataclasses.replace(limits2, cpu_time_s=limits.cpu_time_s)
                # A pre-started sandbox must be confined exactly like a cold one.
                held.pooled = bool(held.cgroup_dirs) or not self.cgroups.limits_memory
            t.mark("cgroup")
            if self.bwrap is None or self.zygote is not None:
                # The zygote starts the run at release, confined before its program runs;
                # unisolated (allow_unisolated), a plain child with its limits set in preexec.
                held.command = command
                return held
            # No preexec_fn: CPython then spawns with vfork+exec. Limits (and cgroups
            # that the spawner thread could not join) are applied to the sandbox's init
            # while bwrap holds it at --block-fd.
            info_r, info_w = os.pipe()
            block_r, held.block_w = os.pipe()
            etc_copies = isolation.open_etc_copies()
            seccomp_fd = syscall_filter.filter_fd()
            try:
                argv = isolation.build_bwrap_argv(
                    self.bwrap, run.work, command, runtime, s.tmpfs_size_mb, tmp_dir=run.tmp, info_fd=info_w,
                    block_fd=block_r, seccomp_fd=seccomp_fd, etc_copies=etc_copies,
                )
                attach_later = self.cgroups.joined_dirs(held.cgroup_dirs) if held.cgroup_dirs else []
                join_now = []
                if attach_later and self.cgroups.kind == "v1":  # a v2 join would move the whole server
                    join_now = self.cgroups.self_join_files(held.cgroup_dirs)
                try:
                    held.proc = await self.spawner.spawn(
                        argv, env=isolation.launcher_env(),
                        pass_fds=(info_w, block_r, seccomp_fd, *(fd for fd, _ in etc_copies)),
                        stdin_pipe=stdin_pipe, join_tasks=join_now, as_run_user=True,
                        # As the run user, bwrap gets the rlimits before its exec: the server
                        # may lack CAP_SYS_RESOURCE to set them on another uid's process.
                        preexec_fn=isolation.make_preexec(limits, []) if self.spawner.user else None,
                    )
                    if held.proc.joined_cgroups:
                        attach_later = []
                finally:
                    os.close(info_w)
                    os.close(block_r)
                    os.close(seccomp_fd)
                    for fd, _ in etc_copies:
                        os.close(fd)
                t.mark("spawn")
                try:
                    # asyncio.timeout, not wait_for: no extra task on the per-run path.
                    async with asyncio.timeout(_SETUP_TIMEOUT_S):
                        held.child = await _read_child_pid(info_r)
                    t.mark("bwrap")
                except TimeoutError:
                    held.error = "the sandbox did not start in time"
            finally:
                os.close(info_r)
            if held.child is not None:
                try:
                    held.pidfd = os.pidfd_open(held.child)
                except (AttributeError, OSError):
                    held.pidfd = -1
                try:
                    isolation.confine_blocked_child(held.child, limits, attach_later,
                                                    rlimits=self.spawner.user is None)
                except OSError as exc:
                    # Never release a sandbox we could not confine.
                    held.error = f"could not apply the run's limits: {exc}"
            # else bwrap failed before it cloned (its stderr says why) or timed out.
            t.mark("confine")
            return held
        except (OSError, subprocess.SubprocessError) as exc:
            await self._dispose(held)
            return sandbox_error(f"could not start the sandbox: {exc}")
        except BaseException:
            await self._dispose(held)
            raise

    async def _execute(self, held: "_Held", payload: dict[str, bytes], limits, stdin, timeout, t: Timings):
        """Write the run's files into the held sandbox, set this request's limits, release
        it and run the program to its end (or the time limit)."""
        cap = self.settings.output_cap_bytes
        user = self.area.user
        owner = (user.uid, user.gid) if user.switched else None
        try:
            for rel, data in payload.items():
                write_file(held.run_dir, rel, data, owner)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                return sandbox_error(f"refused: the request's files exceed the run directory's quota "
                                     f"({self.settings.disk_quota_mb} MB, {self.settings.inode_quota} files)")
            return sandbox_error(f"could not write the run's files: {exc}")
        t.mark("files")
        if held.proc is None and held.command is not None and self.zygote is not None:
            try:
                try:
                    held.proc = await self._spawn_in_zygote(held, limits, timeout)
                except ZygoteError as exc:
                    if isinstance(exc, ZygoteRefusal):
                        return sandbox_error(f"could not start the sandbox: {exc}")
                    # The zygote died (killed from outside?): a new one, once, then the run.
                    if not self._restart_zygote(exc):
                        return sandbox_error(f"could not start the sandbox: {exc}")
                    held.proc = await self._spawn_in_zygote(held, limits, timeout)
            except OSError as exc:  # ZygoteError included: the new zygote failed too
                return sandbox_error(f"could not start the sandbox: {exc}")
        elif held.proc is None and held.command is not None:  # unisolated
            try:
                held.proc = await self.spawner.spawn(
                    held.command, env={**isolation.launcher_env(), "HOME": held.run_dir}, cwd=held.run_dir,
                    stdin_pipe=held.stdin_pipe, preexec_fn=isolation.make_preexec(limits, held.cgroup_dirs),
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return CommandRunResult(status=CommandRunStatus.error, execution_time=0.0, stderr=f"could not start: {exc}")
        proc = held.proc
        if held.error is None and held.child is not None and limits != held.limits and self.spawner.user is None:
            # A pre-started sandbox: this request's CPU time limit. (One started as the
            # run user keeps the largest CPU limit: only its own uid or CAP_SYS_RESOURCE
            # may change its limits; the wall-time kill still ends it on time.)
            try:
                isolation.confine_blocked_child(held.child, limits, [])
            except OSError as exc:
                held.error = f"could not apply the run's limits: {exc}"
        t.mark("start")
        start = time.monotonic()
        out_task = asyncio.ensure_future(_drain(proc.stdout, cap))
        err_task = asyncio.ensure_future(_drain(proc.stderr, cap))
        feeder = None
        timed_out = False
        try:
            if held.block_w >= 0:
                if held.error is None and held.child is not None:
                    os.write(held.block_w, b"1")  # let the init start the program
                os.close(held.block_w)
                held.block_w = -1
            if held.error is None:
                feeder = asyncio.ensure_future(self._feed(proc, stdin))
                try:
                    async with asyncio.timeout(timeout):
                        await proc.wait()
                except TimeoutError:
                    timed_out = True
        finally:
            # Always kill the group: if the program exited normally this is a no-op, on
            # time-out, cancellation or a failed confinement it takes the sandbox down.
            await _kill_and_reap(proc)
        if held.status_r >= 0:
            why = setup_failure(held.status_r)
            held.error = f"could not set up the sandbox: {why}" if why else None
        elapsed = time.monotonic() - start
        t.mark("run")
        if feeder is not None:
            feeder.cancel()
        # After the namespace is gone every write end is closed; bound the wait anyway.
        done, pending = await asyncio.wait({out_task, err_task}, timeout=5)
        for task in pending:
            task.cancel()
        stdout, out_total = out_task.result() if out_task in done else (b"", 0)
        stderr, err_total = err_task.result() if err_task in done else (b"", 0)
        t.mark("drain")
        if held.error is not None:
            return CommandRunResult(
                status=CommandRunStatus.error, execution_time=round(elapsed, 6),
                stderr=f"{held.error}\n{_decode(stderr)}",
            )
        stdout_s, stderr_s = _decode(stdout), _decode(stderr)
        if out_total > cap:
            stdout_s += f"\n[stdout truncated: {out_total} bytes, kept {cap}]\n"
        if err_total > cap:
            stderr_s += f"\n[stderr truncated: {err_total} bytes, kept {cap}]\n"
        killed = timed_out or proc.returncode != 0  # an OOM kill never leaves a clean exit
        if killed and self.cgroups is not None and held.cgroup_dirs and self.cgroups.oom_kills(held.cgroup_dirs):
            # A cgroup OOM kill is a bare SIGKILL: say why, as a runtime's own OOM would.
            stderr_s += f"\n[killed: the run exceeded its memory limit of {held.memory_mb} MB]\n"
        for hit in self.area.quota_hits(held.run):
            # The program saw ENOSPC; say which of its caps it was.
            stderr_s += f"\n[the run filled its {hit}]\n"
        return CommandRunResult(
            status=CommandRunStatus.time_limit_exceeded if timed_out else CommandRunStatus.finished,
            execution_time=round(elapsed, 6),
            return_code=None if timed_out else proc.returncode,
            stdout=stdout_s,
            stderr=stderr_s,
        )

    async def _spawn_in_zygote(self, held: "_Held", limits: isolation.Limits, timeout: float) -> SpawnedChild:
        """Start the held run's program through the zygote (its files are written): its
        init joins the run's cgroups, sets up its namespaces and starts the program."""
        opened: list[int] = []
        ours: list = []
        try:
            status_r, status_w = os.pipe2(os.O_CLOEXEC)
            held.status_r = status_r
            opened.append(status_w)
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            ours.append(open(out_r, "rb", buffering=0))
            opened.append(out_w)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            ours.append(open(err_r, "rb", buffering=0))
            opened.append(err_w)
            if held.stdin_pipe:
                in_r, in_w = os.pipe2(os.O_CLOEXEC)
                ours.append(open(in_w, "wb", buffering=0))
            else:
                in_r = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            opened.append(in_r)
            joins = self._open_cgroup_joins(held.cgroup_dirs)
            opened += joins
            # The init's own alarm is a backstop behind the server's timer (if the server
            # is gone, PR_SET_PDEATHSIG already took the run down).
            pid = await self.zygote.spawn(
                held.run.name, held.command, isolation.SANDBOX_ENV, isolation.rlimit_pairs(limits),
                self._tmp_spec(held.run), math.ceil(timeout) + 10, [in_r, out_w, err_w, status_w, *joins],
            )
        except BaseException:
            for f in ours:
                f.close()
            if held.status_r >= 0:
                os.close(held.status_r)
                held.status_r = -1
            raise
        finally:
            for fd in opened:
                os.close(fd)  # the run has its own copies now
        stdin = ours[2] if held.stdin_pipe else None
        try:
            child = await adopt(pid, functools.partial(reap_pid, pid), ours[0], ours[1], stdin, group_outlives_it=False)
        except BaseException:
            isolation.kill_process_group(pid)
            reap_pid(pid)
            for f in ours:
                f.close()
            raise
        child.joined_cgroups = bool(held.cgroup_dirs)
        return child

    async def _dispose(self, held: "_Held") -> None:
        """Kill whatever is left of a held sandbox and remove its run dir and cgroups.
        Waits for the sandbox's init (and so its whole pid namespace) to be gone, and
        reaps it (the server is a child subreaper), so the cgroups are empty at once."""
        if held.block_w >= 0:
            os.close(held.block_w)  # an unreleased init reads EOF: no program file, it exits
            held.block_w = -1
        if held.status_r >= 0:
            os.close(held.status_r)
            held.status_r = -1
        proc = held.proc
        if proc is not None:
            await _kill_and_reap(proc)
            proc.close()
        if held.pidfd >= 0:
            try:
                async with asyncio.timeout(5):
                    await _wait_readable(held.pidfd)
            except TimeoutError:  # pragma: no cover
                log.error("sandbox init %s did not exit", held.child)
            os.close(held.pidfd)
            held.pidfd = -1
            try:
                os.waitpid(held.child, os.WNOHANG)
            except ChildProcessError:
                pass  # not reparented to us (not a subreaper): init reaps it
        if self.cgroups is not None and held.cgroup_dirs:
            await self.cgroups.aremove(held.cgroup_dirs)
            held.cgroup_dirs = []
        if held.run is not None:
            run, held.run = held.run, None
            if run.mounted:
                self.area.release(run)  # unmounts: instant whatever the program left
            else:
                # A walk of whatever the program left (bounded by its file limits), off
                # the event loop so that other requests go on meanwhile.
                await asyncio.get_running_loop().run_in_executor(None, self.area.release, run)

    def _take_prespawned(self, language: str, memory_mb: int) -> Optional["_Held"]:
        """A pre-started sandbox for `language` (default memory limit only, since node's
        command line depends on it), and start its replacement in the background."""
        if self.settings.prespawn <= 0 or self.bwrap is None or memory_mb != self.settings.default_memory_limit_mb:
            return None
        pool = self._pool.setdefault(language, [])
        held = None
        while pool:
            cand = pool.pop(0)
            if cand.error is None and cand.child is not None and cand.proc is not None and cand.proc.returncode is None:
                held = cand
                break
            self._spawn_background(self._dispose(cand))
        self._refill(language)
        return held

    def _refill(self, language: str) -> None:
        want = self.settings.prespawn - len(self._pool.get(language, [])) - self._filling.get(language, 0)
        for _ in range(max(0, want)):
            self._filling[language] = self._filling.get(language, 0) + 1
            self._spawn_background(self._prespawn_one(language))

    async def _prespawn_one(self, language: str) -> None:
        try:
            runtime = self.runtimes.get(language)
            if runtime is None or self._closed:
                return
            s = self.settings
            command, limits = self._command(language, runtime, s.default_memory_limit_mb)
            # The largest CPU limit any request can get: the request's own is set at
            # release, and lowering a hard limit needs no privilege (raising needs
            # CAP_SYS_RESOURCE, which a server in a container may well lack).
            cpu = s.cpu_time_s if s.cpu_time_s is not None else s.max_run_timeout_s + 1
            limits = dataclasses.replace(limits, cpu_time_s=max(1, math.ceil(cpu)))
            held = await self._prepare(language, runtime, command, limits, s.default_memory_limit_mb, True, Timings())
            if isinstance(held, RunCodeResponse):
                return
            if self._closed or held.error is not None or held.child is None or not held.pooled:
                await self._dispose(held)
                return
            self._pool.setdefault(language, []).append(held)
        except Exception:  # noqa: BLE001 - a failed pre-start only costs a cold start
            log.exception("could not pre-start a %s sandbox", language)
        finally:
            self._filling[language] -= 1

    def _spawn_background(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def aclose(self) -> None:
        """Dispose of pre-started sandboxes, then `close()`."""
        self._closed = True
        for task in list(self._background):
            try:
                await task
            except Exception:  # noqa: BLE001
                pass
        for pool in self._pool.values():
            while pool:
                await self._dispose(pool.pop())
        self.close()

    @staticmethod
    async def _feed(proc, stdin: Optional[str]) -> None:
        if stdin is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(stdin.encode("utf-8", errors="surrogatepass"))
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            try:
                proc.stdin.close()
            except Exception:  # noqa: BLE001 - closing a dead pipe
                pass
