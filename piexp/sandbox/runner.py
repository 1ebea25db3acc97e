"""Run one `/run_code` request: a fresh run directory, the files written safely, the
program spawned under isolation, its output drained and capped, the time limit enforced,
requested files fetched back, and everything removed afterwards."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import math
import os
import shutil
import stat
import subprocess
import tempfile
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
from .settings import SandboxSettings

log = logging.getLogger(__name__)


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


def _open_dir_nofollow(root_fd: int, parts: list[str], create: bool) -> int:
    """Walk `parts` below `root_fd` one component at a time with O_NOFOLLOW, so no symlink
    (planted by a previous step of the program) can redirect us outside the run dir."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_file(root: str, name: str, data: bytes) -> None:
    rel = safe_relative_path(name)
    *dirs, base = rel.split("/")
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dfd = _open_dir_nofollow(root_fd, dirs, create=True)
        try:
            fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            finally:
                os.close(fd)
        finally:
            os.close(dfd)
    finally:
        os.close(root_fd)


def read_file(root: str, name: str, cap: int) -> Optional[bytes]:
    """Read a file the program left behind, refusing symlinks anywhere on the path and
    anything that is not a regular file (a FIFO would block us). None if absent/refused."""
    rel = safe_relative_path(name)
    *dirs, base = rel.split("/")
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            dfd = _open_dir_nofollow(root_fd, dirs, create=False)
        except OSError:
            return None
        try:
            try:
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
        finally:
            os.close(dfd)
    finally:
        os.close(root_fd)


def _rmtree(path: str) -> None:
    """Remove a run directory even if the program chmod-ed parts of it to 000."""

    def onerror(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


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
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    buf = bytearray()
    done: asyncio.Future = loop.create_future()

    def readable() -> None:
        try:
            while True:
                chunk = os.read(fd, 4096)
                if not chunk:
                    if not done.done():
                        done.set_result(None)
                    return
                buf.extend(chunk)
        except BlockingIOError:
            return
        except OSError as exc:  # pragma: no cover
            if not done.done():
                done.set_exception(exc)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
    try:
        pid = json.loads(bytes(buf).decode() or "{}").get("child-pid")
    except ValueError:
        return None
    return int(pid) if isinstance(pid, int) and pid > 0 else None


@dataclass
class Runner:
    """Runs requests under the given settings. Holds the resolved runtimes, the bwrap
    binary, the optional cgroup limiter, and a pool of slots bounding concurrency."""

    settings: SandboxSettings
    bwrap: Optional[str] = None
    cgroups: Optional[isolation.CgroupLimiter] = None
    runtimes: dict[str, Optional[isolation.Runtime]] = field(default_factory=dict)

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
        cgroups = isolation.CgroupLimiter.detect() if settings.use_cgroups else None
        runtimes = {lang: isolation.resolve_runtime(spec.binary) for lang, spec in LANGUAGES.items()}
        log.info(
            "sandbox runner: bwrap=%s cgroups=%s runtimes=%s",
            bwrap, cgroups.kind if cgroups else None,
            {k: (v.binary if v else None) for k, v in runtimes.items()},
        )
        return cls(settings=settings, bwrap=bwrap, cgroups=cgroups, runtimes=runtimes)

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.close()

    def _command(self, language: str, runtime: isolation.Runtime, memory_mb: int) -> tuple[list[str], isolation.Limits]:
        s = self.settings
        spec = LANGUAGES[language]
        cmd = [runtime.binary]
        as_bytes = data_bytes = None
        have_mem_cgroup = self.cgroups is not None and self.cgroups.limits_memory
        if language == "nodejs":
            # V8 sizes its heap from this flag, so a memory bomb fails as a JS heap OOM
            # instead of relying on rlimits (RLIMIT_AS would break node's reservations).
            cmd.append(f"--max-old-space-size={max(16, memory_mb * 3 // 4)}")
            if not have_mem_cgroup:
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
            processes=s.max_processes,
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

        timeout = float(req.run_timeout) if req.run_timeout and req.run_timeout > 0 else 10.0
        timeout = min(timeout, s.max_run_timeout_s)
        memory_mb = req.memory_limit_MB if req.memory_limit_MB and req.memory_limit_MB > 0 else s.default_memory_limit_mb

        run_dir = tempfile.mkdtemp(prefix="piexp-sbx-", dir=s.work_dir)
        cgroup_dirs: list[str] = []
        try:
            os.chmod(run_dir, 0o755)
            try:
                for rel, data in payload.items():
                    write_file(run_dir, rel, data)
                write_file(run_dir, spec.code_file, req.code.encode("utf-8", errors="surrogatepass"))
            except OSError as exc:
                return sandbox_error(f"could not write the run's files: {exc}")
            self._give_to_sandbox_user(run_dir)

            command, limits = self._command(req.language, runtime, memory_mb)
            cpu = s.cpu_time_s if s.cpu_time_s is not None else timeout + 1
            limits = dataclasses.replace(limits, cpu_time_s=max(1, math.ceil(cpu)))
            t.mark("files")
            if self.cgroups is not None:
                try:
                    cgroup_dirs = self.cgroups.create(memory_mb << 20, s.max_processes)
                except OSError as exc:
                    log.warning("could not create a cgroup for a run (%s); rlimits only", exc)
                    cgroup_dirs = []
                    if self.cgroups.limits_memory:
                        command, limits2 = self._command_without_cgroup(req.language, runtime, memory_mb)
                        limits = dataclasses.replace(limits2, cpu_time_s=limits.cpu_time_s)
                t.mark("cgroup")
            result = await self._spawn(run_dir, runtime, command, limits, cgroup_dirs, req.stdin, timeout, t)
            files: dict[str, str] = {}
            for rel in fetch:
                data = read_file(run_dir, rel, s.fetch_file_cap_bytes)
                if data is not None:
                    files[rel] = base64.b64encode(data).decode("ascii")
            ok = result.status == CommandRunStatus.finished and result.return_code == 0
            return RunCodeResponse(
                status=RunStatus.success if ok else RunStatus.failed,
                run_result=result,
                files=files,
            )
        finally:
            t.mark("fetch")
            if self.cgroups is not None and cgroup_dirs:
                self.cgroups.remove(cgroup_dirs)
            _rmtree(run_dir)
            t.mark("cleanup")

    def _command_without_cgroup(self, language, runtime, memory_mb):
        saved, self.cgroups = self.cgroups, None
        try:
            return self._command(language, runtime, memory_mb)
        finally:
            self.cgroups = saved

    def _give_to_sandbox_user(self, run_dir: str) -> None:
        """Make the run dir writable by the sandbox's uid. Run as root, bwrap maps the
        sandbox uid to root outside, so ownership already matches; run unprivileged, it
        maps it to our own uid, which also owns the dir; 0777 is the belt to those braces."""
        if self.bwrap is None:
            return
        try:
            if os.geteuid() == 0:
                return
            os.chmod(run_dir, 0o777)
        except OSError:
            pass

    async def _spawn(self, run_dir, runtime, command, limits, cgroup_dirs, stdin, timeout, t: Timings) -> CommandRunResult:
        cap = self.settings.output_cap_bytes
        start = time.monotonic()
        stdin_mode = asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL
        pipes = dict(stdin=stdin_mode, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        info_r = block_w = -1
        try:
            if self.bwrap is not None:
                # No preexec_fn: CPython then spawns with vfork+exec. Limits and cgroups
                # are applied to the sandbox's init while bwrap holds it at --block-fd.
                info_r, info_w = os.pipe()
                block_r, block_w = os.pipe()
                try:
                    # Read-write, so the init never reads EOF (and starts the program
                    # unconfined) if this server dies before releasing it.
                    block_rw = os.open(f"/proc/self/fd/{block_r}", os.O_RDWR | os.O_CLOEXEC)
                finally:
                    os.close(block_r)
                try:
                    argv = isolation.build_bwrap_argv(
                        self.bwrap, run_dir, command, runtime, self.settings.tmpfs_size_mb,
                        info_fd=info_w, block_fd=block_rw,
                    )
                    proc = await asyncio.create_subprocess_exec(
                        *argv, **pipes, env=isolation.bwrap_env(),
                        start_new_session=True, close_fds=True, pass_fds=(info_w, block_rw),
                    )
                finally:
                    os.close(info_w)
                    os.close(block_rw)
            else:
                proc = await asyncio.create_subprocess_exec(
                    *command, **pipes, env={**isolation.bwrap_env(), "HOME": run_dir}, cwd=run_dir,
                    start_new_session=True, close_fds=True,
                    preexec_fn=isolation.make_preexec(limits, cgroup_dirs),
                )
        except (OSError, subprocess.SubprocessError) as exc:
            for fd in (info_r, block_w):
                if fd >= 0:
                    os.close(fd)
            return CommandRunResult(status=CommandRunStatus.error, execution_time=0.0, stderr=f"could not start: {exc}")
        t.mark("spawn")

        out_task = asyncio.ensure_future(_drain(proc.stdout, cap))
        err_task = asyncio.ensure_future(_drain(proc.stderr, cap))
        feeder = None
        timed_out = False
        confine_error: Optional[str] = None
        try:
            if info_r >= 0:
                try:
                    child = await asyncio.wait_for(_read_child_pid(info_r), timeout)
                    if child is not None:
                        # Held at --block-fd: confine it, then let it start the program.
                        isolation.confine_blocked_child(child, limits, cgroup_dirs)
                        os.write(block_w, b"1")
                    # else bwrap failed before it cloned: its stderr says why.
                except asyncio.TimeoutError:
                    timed_out = True
                except OSError as exc:
                    # Never release a sandbox we could not confine.
                    confine_error = f"could not apply the run's limits: {exc}"
                finally:
                    os.close(info_r)
                    os.close(block_w)
                    info_r = block_w = -1
                t.mark("confine")
            if not timed_out and confine_error is None:
                feeder = asyncio.ensure_future(self._feed(proc, stdin))
                remaining = max(0.0, timeout - (time.monotonic() - start))
                try:
                    await asyncio.wait_for(proc.wait(), remaining)
                except asyncio.TimeoutError:
                    timed_out = True
        finally:
            # Always kill the group: if the program exited normally this is a no-op,
            # on time-out, cancellation or a failed confinement it takes the whole
            # sandbox down.
            isolation.kill_process_group(proc.pid)
            for fd in (info_r, block_w):
                if fd >= 0:
                    os.close(fd)
            if proc.returncode is None:
                try:
                    await asyncio.wait_for(proc.wait(), 5)
                except asyncio.TimeoutError:  # pragma: no cover
                    log.error("bwrap pid %d did not die after SIGKILL", proc.pid)
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
        if confine_error is not None:
            return CommandRunResult(
                status=CommandRunStatus.error, execution_time=round(elapsed, 6),
                stderr=f"{confine_error}\n{_decode(stderr)}",
            )
        stdout_s, stderr_s = _decode(stdout), _decode(stderr)
        if out_total > cap:
            stdout_s += f"\n[stdout truncated: {out_total} bytes, kept {cap}]\n"
        if err_total > cap:
            stderr_s += f"\n[stderr truncated: {err_total} bytes, kept {cap}]\n"
        return CommandRunResult(
            status=CommandRunStatus.time_limit_exceeded if timed_out else CommandRunStatus.finished,
            execution_time=round(elapsed, 6),
            return_code=None if timed_out else proc.returncode,
            stdout=stdout_s,
            stderr=stderr_s,
        )

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
