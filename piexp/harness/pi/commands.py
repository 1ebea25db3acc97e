"""The model's commands, each in a sandbox of its own beside Pi's, never inside it.

Pi's bash tool runs `<shell> -c <command>`; Pi's shell is `/opt/piexp/shell`
(shell.cjs, named in the agent folder's settings.json), which sends the command over the
episode's command socket (`/run/piexp/commands.sock`) to a `CommandServer`. The server
runs it with the sandbox's bwrap launcher, as any program piexp runs: the run user, a
fresh pid, mount, ipc and network namespace, the syscall filter, a memory and pids cgroup
of its own, rlimits, a capped /tmp of its own, and Pi's workspace bound at /sandbox; then
it relays the output and exit code back (framed: one byte of kind, four of length).

Why a sandbox of its own: a command that shares Pi's sandbox shares Pi's user, pid
namespace and files, so it can write Pi's memory (/proc/<pid>/mem), kill Pi while Pi
waits for the model, put programs of its own first on the PATH Pi gives its commands
(Pi's agent folder's bin/), and call the model endpoint past the turn limit through Pi's
loopback forwarder. Here none of that exists: Pi's processes are in another pid
namespace, Pi's agent folder and forwarder are not mounted, the loopback is empty, and
a command that takes all its memory is killed in its own cgroup, not Pi's. Each command's
processes end with it (its pid namespace goes), so nothing of one command can tamper with
a later run of the assigned program.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
from typing import Any

from piexp.sandbox.isolation.layout import SANDBOX_PATH, SANDBOX_WORKDIR
from piexp.sandbox.isolation.rlimits import Limits
from piexp.sandbox.launchers.base import Launch, Launcher
from piexp.sandbox.protocol import RunCodeResponse
from piexp.sandbox.timings import Timings

COMMAND_SOCKET_NAME = "commands.sock"
STDOUT, STDERR, EXIT = 1, 2, 3
_MAX_REQUEST_BYTES = 1 << 20
# Output relayed to Pi per command: Pi keeps its last 50 KB and writes the whole of a
# longer output to a file in its own /tmp, which a flood must not fill.
OUTPUT_CAP_BYTES = 1 << 20
# The variables Pi sets for its commands (its prompt invites the model to read them).
PASSED_ENV = ("PI_SESSION_ID", "PI_PROVIDER", "PI_MODEL", "PI_REASONING_LEVEL")


def command_env(bin_dir: str) -> dict[str, str]:
    """The environment of every model command, whatever Pi's was: the runtimes piexp
    runs programs with first on PATH, and no Python user site (HOME is the command's own
    fresh /tmp anyway)."""
    return {"PATH": f"{bin_dir}:{SANDBOX_PATH}", "PYTHONNOUSERSITE": "1"}


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


class CommandServer:
    """One episode's command socket: each connection runs one command to its end, or
    until its client (Pi's shell) goes away, or the episode ends (`close`)."""

    def __init__(
        self,
        launcher: Launcher,
        socket_path: str,
        workspace: str,
        binds: tuple[str, ...],
        env: dict[str, str],
        *,
        memory_mb: int,
        limits: Limits,
        wall_time_s: float,
    ) -> None:
        """`workspace`: the host directory of Pi's /sandbox; `binds`: the bwrap options
        that show the runtimes at their in-sandbox paths (/opt/piexp/bin and prefixes);
        `env`: the commands' environment (`command_env`)."""
        self.launcher = launcher
        self.socket_path = socket_path
        self.workspace = workspace
        self.binds = binds
        self.env = env
        self.memory_mb = memory_mb
        self.limits = limits
        self.wall_time_s = wall_time_s
        self.commands = 0
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, self.socket_path, limit=_MAX_REQUEST_BYTES)
        os.chmod(self.socket_path, 0o666)  # the run user connects; its folder is bound read-only

    async def close(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            try:
                await task
            except BaseException:  # noqa: BLE001 - the episode is over
                pass
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request: Any = json.loads(await reader.readuntil(b"\n"))
        command = str(request.get("command", "")) if isinstance(request, dict) else ""
        passed = request.get("env") if isinstance(request, dict) else None
        env = {k: str(v) for k, v in (passed or {}).items() if k in PASSED_ENV} if isinstance(passed, dict) else {}
        self.commands += 1
        code = await self._run(command, env, reader, writer)
        writer.write(frame(EXIT, str(code).encode()))
        await writer.drain()

    async def _run(
        self, command: str, env: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> int:
        host = self.launcher.host
        language, runtime = next((lang, rt) for lang, rt in host.runtimes.items() if rt is not None)
        setenv = {**env, **self.env}
        extra = (
            *self.binds,
            "--bind", self.workspace, SANDBOX_WORKDIR,
            *[arg for name, value in setenv.items() for arg in ("--setenv", name, value)],
        )  # fmt: skip
        prepared = await self.launcher.prepare(
            language,
            runtime,
            self.memory_mb,
            self.limits.cpu_time_s or 1,
            False,
            Timings(),
            command=(["/bin/bash", "-c", command], self.limits),
            extra_args=extra,
        )
        if isinstance(prepared, RunCodeResponse):
            writer.write(frame(STDERR, f"piexp could not start the command: {prepared.message}\n".encode()))
            return 126
        launch: Launch = prepared
        try:
            return await self._relay(launch, reader, writer)
        finally:
            await asyncio.shield(self.launcher.dispose(launch))

    async def _relay(self, launch: Launch, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
        await launch.start(self.limits, self.wall_time_s)
        proc = launch.proc
        assert proc is not None
        budget = [OUTPUT_CAP_BYTES]

        async def pump(stream: asyncio.StreamReader, kind: int) -> None:
            while chunk := await stream.read(1 << 16):
                kept = chunk[: budget[0]]
                budget[0] -= len(kept)
                if kept:
                    writer.write(frame(kind, kept))
                    await writer.drain()

        pumps = [asyncio.ensure_future(pump(proc.stdout, STDOUT)), asyncio.ensure_future(pump(proc.stderr, STDERR))]
        gone = asyncio.ensure_future(reader.read(1))  # EOF: Pi killed its shell (a timeout, an abort)
        try:
            launch.release()
            if launch.error is not None:
                writer.write(frame(STDERR, f"piexp could not start the command: {launch.error}\n".encode()))
                return 126
            waited = asyncio.ensure_future(proc.wait())
            await asyncio.wait({waited, gone}, timeout=self.wall_time_s, return_when=asyncio.FIRST_COMPLETED)
            if not waited.done():
                waited.cancel()
                await proc.kill_and_wait()
            await asyncio.wait(pumps, timeout=5)
        finally:
            gone.cancel()
            for task in pumps:
                task.cancel()
            await proc.kill_and_wait()
        launch.after_exit()
        if launch.error is not None:  # bash never ran: the sandbox's failure, not the command's exit
            writer.write(frame(STDERR, f"piexp could not start the command: {launch.error}\n".encode()))
            return 126
        cgroups = self.launcher.host.cgroups
        if cgroups is not None and launch.cgroup_dirs and cgroups.oom_kills(launch.cgroup_dirs):
            writer.write(frame(STDERR, f"piexp: killed: the command exceeded its {self.memory_mb} MB\n".encode()))
        if budget[0] <= 0:
            writer.write(frame(STDERR, f"piexp: output cut at {OUTPUT_CAP_BYTES} bytes\n".encode()))
        code = proc.returncode if proc.returncode is not None else 137
        return 128 - code if code < 0 else code
