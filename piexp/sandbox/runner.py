"""Run one `/run_code` request: its files decoded and checked, a sandbox prepared by the
server's launcher (launchers/), the files written, the program started and released,
its output drained and capped, the time limit enforced, requested files fetched back,
and the sandbox disposed of."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import errno
import logging
import math
import time
from dataclasses import dataclass
from typing import Optional, Union

from . import syscall_filter
from .isolation import detect_cgroups
from .isolation.layout import resolve_runtime
from .isolation.process import set_child_subreaper
from .launchers.base import Host, Launch, Launcher, StartFailed
from .launchers.bwrap import BwrapLauncher, bwrap_path
from .launchers.unisolated import UnisolatedLauncher
from .launchers.zygote import ZygoteLauncher
from .protocol import (
    PROTOCOL_LANGUAGES,
    CommandRunResult,
    CommandRunStatus,
    RunCodeRequest,
    RunCodeResponse,
    RunStatus,
    sandbox_error,
)
from .run_area import RunArea, RunUser
from .run_dir import UnsafePathError, read_file, safe_relative_path, write_file
from .settings import SandboxSettings
from .spawn import Spawner
from .timings import Timings

__all__ = ["Runner", "Timings"]

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


@dataclass
class Runner:
    """Runs requests under the given settings through one launcher."""

    settings: SandboxSettings
    host: Host  # what the launchers share: the run area, cgroups, spawner, runtimes
    launcher: Launcher

    @classmethod
    def create(cls, settings: SandboxSettings) -> "Runner":
        bwrap = bwrap_path()
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
        if bwrap is not None:
            try:
                syscall_filter.filter_bpf()
            except syscall_filter.SyscallFilterError as exc:
                raise RuntimeError(f"{exc}; the sandbox does not run programs without its syscall filter") from exc
        user = RunUser.for_server(settings.run_uid, settings.run_gid)
        area = RunArea.create(
            settings.work_dir,
            user,
            disk_quota_bytes=settings.disk_quota_mb << 20,
            tmp_bytes=settings.tmpfs_size_mb << 20,
            inode_quota=settings.inode_quota,
        )
        cgroups = detect_cgroups() if settings.use_cgroups else None
        if bwrap is not None:
            # A sandbox's init outlives the outer bwrap by a moment; as a subreaper this
            # process reaps it itself (see `BwrapLaunch.close`), instead of waiting for the
            # host's init to, before the run's cgroups can be removed.
            set_child_subreaper()
        runtimes = {lang: resolve_runtime(spec.binary) for lang, spec in PROTOCOL_LANGUAGES.items()}
        try:
            # A runtime the run user cannot reach (a pyenv under a 0700 /root) is bound
            # from a read-only view of it in the run area.
            runtimes = {
                lang: rt and dataclasses.replace(rt, bind_source=rt.bind_prefix and area.view_of(rt.bind_prefix))
                for lang, rt in runtimes.items()
            }
        except RuntimeError:
            area.close()
            raise
        except OSError as exc:
            area.close()
            raise RuntimeError(
                f"could not make the runtimes reachable for the run user (uid {user.uid}): {exc}"
            ) from exc
        spawner = Spawner(
            cgroups.home_tasks if cgroups is not None else None, user=(user.uid, user.gid) if user.switched else None
        )
        host = Host(settings=settings, area=area, cgroups=cgroups, spawner=spawner, runtimes=runtimes)
        launcher: Launcher
        if bwrap is None:
            launcher = UnisolatedLauncher(host)
        else:
            launcher = BwrapLauncher(host, bwrap)
            if settings.launcher == "zygote":
                launcher = ZygoteLauncher.start(host, fallback=launcher) or launcher
        log.info(
            "sandbox runner: launcher=%s cgroups=%s prespawn=%d run uid/gid=%d/%d%s quotas=%s runtimes=%s",
            launcher.name if bwrap is None or launcher.name == "zygote" else bwrap,
            cgroups.kind if cgroups else None,
            settings.prespawn,
            user.uid,
            user.gid,
            " (the server's own)" if not user.switched else "",
            "per-run tmpfs" if area.mounts else "none for the run dir (the server cannot mount)",
            {k: (v.binary if v else None) for k, v in runtimes.items()},
        )
        return cls(settings=settings, host=host, launcher=launcher)

    def close(self) -> None:
        self.launcher.close()
        self.host.spawner.close()
        if self.host.cgroups is not None:
            self.host.cgroups.close()
        self.host.area.close()

    async def aclose(self) -> None:
        """Dispose of pre-started sandboxes, then `close()`."""
        await self.launcher.aclose()
        self.close()

    async def run(self, req: RunCodeRequest, timings: Optional[Timings] = None) -> RunCodeResponse:
        """Run one request. `timings`, when given, receives a span per step (the server
        sends them back in a `Server-Timing` header)."""
        t = timings if timings is not None else Timings()
        s = self.settings
        spec = PROTOCOL_LANGUAGES[req.language]  # the server has checked the language already
        runtime = self.host.runtimes.get(req.language)
        if runtime is None:
            # SandboxFusion answers a missing runtime like a shell would.
            return RunCodeResponse(
                status=RunStatus.failed,
                run_result=CommandRunResult(
                    status=CommandRunStatus.finished,
                    execution_time=0.0,
                    return_code=127,
                    stdout="",
                    stderr=f"{spec.binary}: command not found\n",
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
        memory_mb = (
            req.memory_limit_MB if req.memory_limit_MB and req.memory_limit_MB > 0 else s.default_memory_limit_mb
        )
        cpu = max(1, math.ceil(s.cpu_time_s if s.cpu_time_s is not None else timeout + 1))
        t.mark("parse")

        launch = self.launcher.take_prepared(req.language, memory_mb)
        if launch is not None:
            t.mark("prespawned")
        else:
            prepared = await self.launcher.prepare(req.language, runtime, memory_mb, cpu, req.stdin is not None, t)
            if isinstance(prepared, RunCodeResponse):
                return prepared
            launch = prepared
        try:
            result = await self._execute(launch, payload, cpu, req.stdin, timeout, t)
            if isinstance(result, RunCodeResponse):
                return result
            files: dict[str, str] = {}
            budget = s.max_fetch_total_mb << 20
            left_out = []
            for rel in fetch:
                data = read_file(launch.run_dir, rel, s.fetch_file_cap_bytes)
                if data is None:
                    continue
                if len(data) > budget:
                    left_out.append(rel)
                    continue
                budget -= len(data)
                files[rel] = base64.b64encode(data).decode("ascii")
            ok = result.status == CommandRunStatus.finished and result.return_code == 0
            note = (
                f"left out, past max_fetch_total_mb ({s.max_fetch_total_mb} MB of fetched files in all): "
                f"{', '.join(left_out)}"
                if left_out
                else ""
            )
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
            await asyncio.shield(self.launcher.dispose(launch))
            t.mark("cleanup")

    async def _execute(
        self,
        launch: Launch,
        payload: dict[str, bytes],
        cpu_time_s: int,
        stdin: Optional[str],
        timeout: float,
        t: Timings,
    ) -> Union[CommandRunResult, RunCodeResponse]:
        """Write the run's files into the prepared sandbox, start and release its program
        and run it to its end (or the time limit)."""
        s = self.settings
        cap = s.output_cap_bytes
        area = self.host.area
        try:
            for rel, data in payload.items():
                write_file(launch.run_dir, rel, data, self.host.run_user)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                return sandbox_error(
                    f"refused: the request's files exceed the run directory's quota "
                    f"({s.disk_quota_mb} MB, {s.inode_quota} files)"
                )
            return sandbox_error(f"could not write the run's files: {exc}")
        t.mark("files")
        try:
            await launch.start(dataclasses.replace(launch.limits, cpu_time_s=cpu_time_s), timeout)
        except StartFailed as failed:
            return failed.result
        proc = launch.proc
        assert proc is not None and launch.run is not None  # started, not yet released
        t.mark("start")
        start = time.monotonic()
        out_task = asyncio.ensure_future(_drain(proc.stdout, cap))
        err_task = asyncio.ensure_future(_drain(proc.stderr, cap))
        feeder = None
        timed_out = False
        try:
            launch.release()
            if launch.error is None:
                feeder = asyncio.ensure_future(_feed(proc, stdin))
                try:
                    async with asyncio.timeout(timeout):
                        await proc.wait()
                except TimeoutError:
                    timed_out = True
        finally:
            # Always kill the group: if the program exited normally this is a no-op, on
            # time-out, cancellation or a failed confinement it takes the sandbox down.
            await proc.kill_and_wait()
        launch.after_exit()
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
        if launch.error is not None:
            # The sandbox failed before the program ran (set-up, limits, exec): piexp's
            # failure, which every client reads from SandboxError and never scores.
            return sandbox_error(f"{launch.error}\n{_decode(stderr)[:2000]}".rstrip())
        stdout_s, stderr_s = _decode(stdout), _decode(stderr)
        if out_total > cap:
            stdout_s += f"\n[stdout truncated: {out_total} bytes, kept {cap}]\n"
        if err_total > cap:
            stderr_s += f"\n[stderr truncated: {err_total} bytes, kept {cap}]\n"
        killed = timed_out or proc.returncode != 0  # an OOM kill never leaves a clean exit
        cgroups = self.host.cgroups
        if killed and cgroups is not None and launch.cgroup_dirs and cgroups.oom_kills(launch.cgroup_dirs):
            # A cgroup OOM kill is a bare SIGKILL: say why, as a runtime's own OOM would.
            stderr_s += f"\n[killed: the run exceeded its memory limit of {launch.memory_mb} MB]\n"
        for hit in area.quota_hits(launch.run):
            # The program saw ENOSPC; say which of its caps it was.
            stderr_s += f"\n[the run filled its {hit}]\n"
        return CommandRunResult(
            status=CommandRunStatus.time_limit_exceeded if timed_out else CommandRunStatus.finished,
            execution_time=round(elapsed, 6),
            return_code=None if timed_out else proc.returncode,
            stdout=stdout_s,
            stderr=stderr_s,
        )


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
