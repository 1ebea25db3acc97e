"""Warm slots (`harness.options.warm=true`): one sandbox holding one long-lived
`pi --mode rpc` process (piexp.harness.pi.rpc) that plays episodes one after another, so
an episode pays no node start-up and no module loading (docs/harness.md).

A slot is the one-process episode's sandbox (piexp.harness.pi.sandbox: the same binds,
run user, cgroups, rlimits, syscall filter and in-sandbox paths), started once. An
episode in it: the workspace's files and a fresh agent folder written, a new endpoint on
the slot's socket, `new_session` (which re-reads the agent folder), `prompt`, and the
events up to `agent_settled`. Between episodes a reset leaves nothing of the last one:
every process of the sandbox but its init and Pi is killed (found by the sandbox's pid
namespace: whatever the model double-forked or made ignore signals is still in it, and
SIGKILL is not ignorable; Pi starts its commands itself, so they cannot be put into a
cgroup of their own), `/sandbox`, `/tmp` and `/dev/shm` are emptied, the agent folder is
written afresh, the endpoint is a new one (a request of the last episode reaches none),
and only the events after the new session's response are read as the next episode's.

A slot is recycled after `slot_episodes` episodes, when Pi's resident set passes
`slot_rss_mb` (node's heap is capped at `slot_heap_mb`), or once Pi has used half of its
CPU time limit (the one-process episode's, which the model's commands inherit). On a hang (the wall limit), a
crash, a memory kill or a failed reset the whole slot is killed, and the next episode
starts a fresh one: the one-process episode's cost, paid only then.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from piexp.harness.endpoint import EpisodeEndpoint
from piexp.harness.pi.rpc import RpcStream, command, record_of, rpc_argv
from piexp.harness.pi.sandbox import AGENT_DIR, PI_SETTINGS, PiRun, PiSandbox, Verify, _read_workspace
from piexp.sandbox.isolation.rlimits import Limits
from piexp.sandbox.launchers.bwrap import BwrapLaunch
from piexp.sandbox.protocol import RunCodeResponse
from piexp.sandbox.run_dir import remove_tree, write_file
from piexp.sandbox.timings import Timings

_START_TIMEOUT_S = 60.0  # Pi's start and a new session: ~0.5 s, more on a busy machine
_RESET_TIMEOUT_S = 10.0  # the strays of an episode are gone in ms; this only bounds a hang


# The episode's endpoint (its responder, its model name) listening at a socket path.
EndpointFactory = Callable[[str], EpisodeEndpoint]


#: A slot replaced for its memory within this many episodes is named in a warning: its
#: Pi's working size (about 150 MB after its first 50 episodes, docs/harness.md) is past
#: `slot_rss_mb` for this run's episodes.
_FEW_EPISODES = 20


class SlotFailure(Exception):
    """The slot's Pi could not be started or given a new session: piexp's failure."""


@dataclass(frozen=True)
class SlotLimits:
    memory_mb: int
    max_processes: int
    wall_time_s: float
    episodes: int  # episodes a slot plays before it is recycled
    rss_mb: int  # Pi's resident set past which a slot is recycled
    heap_mb: int  # node's --max-old-space-size


class PiSlot:
    """One sandbox with one Pi in RPC mode; episodes play in it one at a time."""

    def __init__(self, sandbox: PiSandbox, model: str, limits: SlotLimits, layout: tuple[str, ...] = ()) -> None:
        """`layout`: more bwrap options for the slot's sandbox and its commands' (a task's
        working folder): a slot plays the episodes of one layout."""
        self.sandbox = sandbox
        self.model = model
        self.limits = limits
        self.layout = layout
        self.launch: BwrapLaunch | None = None
        self.dirs: tuple[str, str] | None = None
        self.episodes = 0
        self.starts = 0  # how many Pi processes this slot has started (restarts included)
        self.pi_pid: int | None = None
        self._stream: RpcStream | None = None
        self._stderr = bytearray()
        self._stderr_task: asyncio.Future | None = None
        self._commands = 0
        self._limits: Limits | None = None  # the slot's rlimits (its model commands' too)
        self._agent_names: frozenset[str] = frozenset()  # the agent folder's files, bound read-only

    @property
    def alive(self) -> bool:
        launch = self.launch
        return launch is not None and launch.proc is not None and launch.proc.returncode is None

    @property
    def socket_path(self) -> str:
        assert self.dirs is not None
        return os.path.join(self.dirs[1], "endpoint.sock")

    # ------------------------------------------------------------------ start and stop

    async def _start(self, agent_files: dict[str, str]) -> None:
        sandbox, lim = self.sandbox, self.limits
        host, s = sandbox.runner.host, sandbox.runner.settings
        self.dirs = sandbox.episode_dirs()
        # The agent folder's files are bound read-only one by one (PiSandbox._bwrap_args),
        # so they exist before the sandbox does, and each episode rewrites them in place.
        self._agent_names = frozenset(agent_files)
        self._write_agent_dir(agent_files)
        # The one-process episode's CPU limit, so the model's commands (which inherit it)
        # see the same `ulimit -t`; Pi's own CPU adds up over the slot's episodes, so the
        # slot is recycled once Pi has used half of it (one episode's Pi uses far less).
        limits = Limits(
            cpu_time_s=max(1, int(lim.wall_time_s) + 1),
            file_size_bytes=s.max_file_size_mb << 20,
            open_files=max(s.max_open_files, 1024),
            processes=None if host.cgroups is not None and host.cgroups.limits_pids else lim.max_processes,
        )
        self._limits = limits
        language, runtime = next((lang, rt) for lang, rt in host.runtimes.items() if rt is not None)
        prepared = await sandbox.launcher.prepare(
            language,
            runtime,
            lim.memory_mb,
            limits.cpu_time_s,
            True,
            Timings(),
            command=(rpc_argv(sandbox.install, self.model, lim.heap_mb), limits),
            extra_args=(*sandbox._bwrap_args(*self.dirs), *self.layout),
        )
        if isinstance(prepared, RunCodeResponse):
            raise SlotFailure(str(prepared.message or prepared))
        assert isinstance(prepared, BwrapLaunch)  # PiSandbox's runner always launches with bwrap
        self.launch = prepared
        await prepared.start(limits, lim.wall_time_s)
        prepared.release()
        if prepared.error is not None or prepared.proc is None:
            raise SlotFailure(prepared.error or "the sandbox did not start Pi")
        self._stream = RpcStream(prepared.proc.stdout)
        self._stderr = bytearray()
        self._stderr_task = asyncio.ensure_future(self._keep_stderr(prepared.proc.stderr))
        self.episodes = 0
        self.starts += 1
        self.pi_pid = None

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(1 << 16):
            self._stderr.extend(chunk)
            del self._stderr[: max(0, len(self._stderr) - (1 << 20))]

    async def kill(self) -> None:
        """Kill the whole slot (Pi, its sandbox, its cgroups, run and endpoint folders)."""
        launch, self.launch = self.launch, None
        self._stream = None
        self.pi_pid = None
        if launch is not None:
            await asyncio.shield(self.sandbox.launcher.dispose(launch))
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            self._stderr_task = None
        if self.dirs is not None:
            dirs, self.dirs = self.dirs, None
            self.sandbox.release_dirs(dirs)

    # ------------------------------------------------------------------ an episode

    async def play(
        self,
        endpoint_at: EndpointFactory,
        prompt: str,
        files: dict[str, str],
        agent_files: dict[str, str],
        verify: Verify | None = None,
        task_env: dict[str, str] | None = None,
    ) -> tuple[PiRun, EpisodeEndpoint]:
        """One episode in this slot (started, or restarted, first if it is not alive),
        its model answered by `endpoint_at(socket path)`, its workspace graded by `verify`
        before the slot is reset; `task_env`: the task's variables, for its commands."""
        try:
            await self._new_session(agent_files)
        except (SlotFailure, OSError, TimeoutError) as error:
            # Pi died since the last episode, or could not start: once more from scratch
            # (no request of this episode was made yet).
            await self.kill()
            try:
                await self._new_session(agent_files)
            except (SlotFailure, OSError, TimeoutError) as again:
                await self.kill()
                run = PiRun(
                    None, b"", b"", False, False, {}, error=f"could not start Pi in a warm slot: {again or error}"
                )
                return run, endpoint_at("")  # never started: no call
        launch = self.launch
        assert launch is not None and launch.run is not None and launch.proc is not None
        host = self.sandbox.runner.host
        for name, text in files.items():
            write_file(launch.run.work, name, text.encode(), host.run_user)
        cgroups = host.cgroups
        ooms_before = cgroups.oom_kills(launch.cgroup_dirs) if cgroups is not None and launch.cgroup_dirs else 0
        endpoint = endpoint_at(self.socket_path)
        assert self.dirs is not None and self._limits is not None
        # This episode's commands, each in a sandbox of its own beside Pi's (commands.py);
        # closing the server at the episode's end ends every command still running.
        commands = self.sandbox.command_server(
            launch, self.dirs[1], memory_mb=self.limits.memory_mb, limits=self._limits,
            wall_time_s=self.limits.wall_time_s, extra=self.layout, task_env=task_env,
        )  # fmt: skip
        try:
            await commands.start()
            await endpoint.start()
            events, settled, timed_out = await self._prompt(prompt)
        except BaseException:
            await asyncio.shield(commands.close())
            await endpoint.close()
            await self.kill()
            raise
        await commands.close()
        await endpoint.close()
        self.episodes += 1
        ooms = cgroups.oom_kills(launch.cgroup_dirs) if cgroups is not None and launch.cgroup_dirs else 0
        workspace = _read_workspace(launch.run.work)
        returncode: int | None = 0
        if not settled:
            if not timed_out:
                try:
                    async with asyncio.timeout(5):
                        returncode = await launch.proc.wait()
                except TimeoutError:
                    returncode = None
            else:
                returncode = None
        run = PiRun(returncode, events, bytes(self._stderr), timed_out, ooms > ooms_before, workspace)
        if verify is not None:
            try:
                run.graded = await verify(launch.run.work)
            except BaseException:
                await self.kill()
                raise
        if settled and ooms == ooms_before and self.alive:
            try:
                async with asyncio.timeout(_RESET_TIMEOUT_S):
                    await self._reset()
            except (OSError, TimeoutError):
                await self.kill()
            else:
                rss_mb = self._pi_rss_mb()
                if rss_mb > self.limits.rss_mb and self.episodes < _FEW_EPISODES:
                    # The same text for every slot of a run, so Python's warning filter shows it once.
                    warnings.warn(
                        f"a warm Pi slot outgrew its recycling size within its first {_FEW_EPISODES} episodes: "
                        f"past harness.options.slot_rss_mb={self.limits.rss_mb}, and was replaced: these episodes "
                        "pay a Pi start every few episodes; raise slot_rss_mb (and memory_mb) to keep slots warm",
                        stacklevel=1,
                    )
                if (
                    self.episodes >= self.limits.episodes
                    or rss_mb > self.limits.rss_mb
                    or self._pi_cpu_s() > (int(self.limits.wall_time_s) + 1) / 2
                ):
                    await self.kill()
        else:
            await self.kill()
        return run, endpoint

    async def _request(self, kind: str, **fields: object) -> dict:
        """Send a command; its response (records before it are the last episode's: dropped)."""
        launch, stream = self.launch, self._stream
        assert launch is not None and launch.proc is not None and stream is not None
        stdin = launch.proc.stdin
        assert stdin is not None
        self._commands += 1
        command_id = f"{kind}-{self._commands}"
        stdin.write(command(kind, command_id, **fields))
        await stdin.drain()
        while (line := await stream.next_line()) is not None:
            record = record_of(line)
            if record is not None and record.get("type") == "response" and record.get("id") == command_id:
                if not record.get("success"):
                    raise SlotFailure(f"Pi refused {kind}: {record.get('error')}")
                return record
        raise SlotFailure(f"Pi exited before it answered {kind}")

    async def _new_session(self, agent_files: dict[str, str]) -> None:
        agent_files = {**agent_files, "settings.json": json.dumps(PI_SETTINGS)}
        if self.alive and frozenset(agent_files) != self._agent_names:
            await self.kill()  # another set of agent files than the sandbox binds
        if not self.alive:
            await self.kill()
            await self._start(agent_files)
        assert self.dirs is not None
        self._write_agent_dir(agent_files)
        async with asyncio.timeout(_START_TIMEOUT_S):
            await self._request("new_session")
        if self.pi_pid is None:
            self.pi_pid = self._find_pi()
        self._stderr.clear()

    async def _prompt(self, prompt: str) -> tuple[bytes, bool, bool]:
        """(the episode's event lines, whether Pi settled, whether the wall limit passed)."""
        stream = self._stream
        assert stream is not None
        events = bytearray()
        cap = self.sandbox.output_cap_bytes
        try:
            async with asyncio.timeout(self.limits.wall_time_s):
                await self._request("prompt", message=prompt)
                # Events Pi emitted before its response to `prompt` are this run's too;
                # `_request` drops records before the response, so Pi answers before it
                # starts the run (docs/rpc.md: the response is sent once it is accepted).
                while (line := await stream.next_line()) is not None:
                    record = record_of(line)
                    if record is None or record.get("type") == "response":
                        continue
                    if len(events) < cap:
                        events.extend(line[: cap - len(events)] + b"\n")
                    if record.get("type") == "agent_settled":
                        return bytes(events), True, False
        except TimeoutError:
            return bytes(events), False, True
        except SlotFailure:
            pass
        return bytes(events), False, False

    # ------------------------------------------------------------------ the reset

    def _write_agent_dir(self, agent_files: dict[str, str]) -> None:
        """Each file written in place (the same inode: its read-only bind shows the new
        text), owned by the server, never by the run user."""
        assert self.dirs is not None
        for name, text in agent_files.items():
            write_file(self.dirs[0], name, text.encode())

    async def _reset(self) -> None:
        """Kill every process of the sandbox but its init and Pi, then empty the
        workspace, /tmp and /dev/shm (the agent folder is rewritten by the next episode)."""
        launch = self.launch
        assert launch is not None and launch.run is not None and launch.child is not None
        keep = {launch.child, self.pi_pid}
        # (A zombie is dead already: its parent, the init or Pi, reaps it.)
        while strays := [pid for pid in _namespace_pids(launch.child) if pid not in keep and not _zombie(pid)]:
            for pid in strays:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            await asyncio.sleep(0.001)
        root = f"/proc/{launch.child}/root"
        _empty(launch.run.work)
        tmp = launch.run.tmp or f"{root}/tmp"
        agent = os.path.join(tmp, os.path.basename(AGENT_DIR))
        # What Pi (or the model, through Pi's write tool) left in the agent folder beside
        # its read-only files (an APPEND_SYSTEM.md, Pi's session files) goes too.
        _empty(agent, keep=(*self._agent_names, "bin"))
        _empty(tmp, keep=(os.path.basename(AGENT_DIR),))
        _empty(f"{root}/dev/shm")
        if not self.alive:
            raise OSError("Pi exited during the reset")

    def _find_pi(self) -> int | None:
        """Pi's pid: the first process the sandbox's init started."""
        launch = self.launch
        if launch is None or launch.child is None:
            return None
        children = [pid for pid in _namespace_pids(launch.child) if _parent(pid) == launch.child]
        return min(children, key=_start_time, default=None)

    def _pi_cpu_s(self) -> float:
        """Pi's own CPU time (what its RLIMIT_CPU counts; its children count their own)."""
        fields = _stat_fields(self.pi_pid) if self.pi_pid is not None else []
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if len(fields) > 12 else 0.0

    def _pi_rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.pi_pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except (OSError, ValueError):
            pass
        return 0.0


def _namespace_pids(init: int) -> list[int]:
    """Every process in the pid namespace of `init` (the sandbox's), init included."""
    try:
        namespace = os.readlink(f"/proc/{init}/ns/pid")
    except OSError:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _stat_fields(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return not fields or fields[0] in ("Z", "X")


def _parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _start_time(pid: int) -> int:
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else 1 << 62


def _empty(path: str, keep: tuple[str, ...] = ()) -> None:
    """Remove everything in the directory `path` (never following a symlink), but `keep`."""
    try:
        entries = os.listdir(path)
    except FileNotFoundError:
        return
    for name in entries:
        if name not in keep:
            remove_tree(os.path.join(path, name))


class WarmSlots:
    """A run's warm slots: an idle one of the episode's layout plays the next episode,
    else a new one starts (the harness bounds how many episodes play at once). Idle slots
    of other layouts (other tasks' working folders) are kept while the run holds fewer than
    `max_slots` slots, so runs that mix tasks of several layouts do not restart Pi at every
    switch."""

    def __init__(self, model: str, limits: SlotLimits, max_slots: int = 64) -> None:
        self.model = model
        self.limits = limits
        self.max_slots = max_slots
        self._idle: list[PiSlot] = []
        self._busy: set[PiSlot] = set()
        self.started_at = time.monotonic()

    async def play(
        self,
        sandbox: PiSandbox,
        endpoint_at: EndpointFactory,
        prompt: str,
        files: dict[str, str],
        agent_files: dict[str, str],
        layout: tuple[str, ...] = (),
        verify: Verify | None = None,
        task_env: dict[str, str] | None = None,
    ) -> tuple[PiRun, EpisodeEndpoint]:
        idle = next((slot for slot in reversed(self._idle) if slot.layout == layout), None)
        if idle is not None:
            self._idle.remove(idle)
        elif self._idle and len(self._idle) + len(self._busy) >= self.max_slots:
            # The oldest idle slot of another layout makes room: the run holds no more
            # slots than episodes it may play at once.
            await self._idle.pop(0).kill()
        slot = idle or PiSlot(sandbox, self.model, self.limits, layout)
        self._busy.add(slot)
        try:
            return await slot.play(endpoint_at, prompt, files, agent_files, verify, task_env)
        except BaseException:
            # Cut short (a rollout's timeout cancelled it, or piexp's own error): the
            # slot was not reset, so it goes.
            await asyncio.shield(slot.kill())
            raise
        finally:
            self._busy.discard(slot)
            if slot.alive:
                self._idle.append(slot)
            else:
                await slot.kill()

    @property
    def slots(self) -> list[PiSlot]:
        return [*self._idle, *self._busy]

    async def aclose(self) -> None:
        for slot in self.slots:
            await slot.kill()
        self._idle.clear()
        self._busy.clear()
