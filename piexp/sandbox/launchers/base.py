"""The launcher interface: how a run's sandbox is prepared (its run directory and
cgroups, and whatever the launcher starts ahead), started once its files are written,
released, and disposed of. Each launcher (bwrap.py, zygote.py, unisolated.py) has a
`Launcher` that prepares `Launch`es and a `Launch` subclass that knows how its own
sandbox starts and ends; the runner only drives that sequence."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional, Union

from ..command import run_command
from ..isolation.cgroups import Cgroups
from ..isolation.layout import Runtime
from ..isolation.rlimits import Limits
from ..protocol import CommandRunResult, RunCodeResponse, sandbox_error
from ..run_area import RunArea, RunDirs
from ..settings import SandboxSettings
from ..spawn import SpawnedChild, Spawner
from ..timings import Timings

log = logging.getLogger(__name__)


@dataclass
class Host:
    """What every launcher of one server shares."""

    settings: SandboxSettings
    area: RunArea  # where run directories live, owned by the run user
    cgroups: Optional[Cgroups]  # None: rlimits only
    spawner: Spawner  # starts the server's children (bwrap, unisolated programs)
    runtimes: dict[str, Optional[Runtime]]  # language -> resolved runtime (None: not installed)

    @property
    def run_user(self) -> Optional[tuple[int, int]]:
        """(uid, gid) a run's processes are started as, None: the server's own."""
        user = self.area.user
        return (user.uid, user.gid) if user.switched else None


class StartFailed(Exception):
    """A sandbox could not start its program; `result` is what the request gets back."""

    def __init__(self, result: Union[RunCodeResponse, CommandRunResult]) -> None:
        super().__init__(str(result))
        self.result = result


@dataclass(eq=False)
class Launch:
    """One run's sandbox from preparation to disposal."""

    run: Optional[RunDirs]  # None once released
    command: list[str]  # the program's argv inside the sandbox
    limits: Limits  # what it was prepared with (a pre-started one: the largest CPU limit)
    memory_mb: int
    stdin_pipe: bool  # whether the program's stdin is a pipe (else /dev/null)
    cgroup_dirs: list[str] = field(default_factory=list)
    # Whether it is confined exactly like a cold start, so it may wait in a pool.
    pooled: bool = True
    proc: Optional[SpawnedChild] = None  # the sandbox's leading process, once started
    error: Optional[str] = None  # why the program must not run (or did not start)
    # More launcher options for a command other than a program file (bwrap: binds and
    # environment; see build_bwrap_argv).
    extra_args: tuple[str, ...] = ()

    @property
    def run_dir(self) -> str:
        return self.run.work if self.run is not None else ""

    async def start(self, limits: Limits, timeout: float) -> None:
        """The run's files are written: start the program, held until `release` if the
        launcher can hold it, under `limits`. Raises StartFailed."""

    def release(self) -> None:
        """Let a held program run."""

    def after_exit(self) -> None:
        """The sandbox has exited: record in `error` why its set-up failed, if it did."""

    async def close(self) -> None:
        """Kill and reap what is left of the sandbox's processes."""
        if self.proc is not None:
            await self.proc.kill_and_wait()
            self.proc.close()


class Launcher(ABC):
    """Prepares and disposes of the sandboxes of one way of starting runs."""

    name: str  # the `sandbox.launcher` setting value, for logs

    def __init__(self, host: Host) -> None:
        self.host = host

    @abstractmethod
    def _new_launch(self, **fields) -> Launch:
        """This launcher's `Launch` for a prepared run directory."""

    @abstractmethod
    async def _hold(self, launch: Launch, runtime: Runtime, t: Timings) -> None:
        """Start whatever this launcher starts ahead of the run's files (bwrap: the
        sandbox, held before its program); raises OSError when it cannot."""

    def take_prepared(self, language: str, memory_mb: int) -> Optional[Launch]:
        """A sandbox started ahead of requests, if this launcher keeps any."""
        return None

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
        """Create the run dir and cgroups and start what the launcher starts ahead of
        the files; a `Launch`, or a SandboxError response. `command`: (argv, limits) of a
        command other than the language's program file, with the launcher's `extra_args`."""
        host, s = self.host, self.host.settings
        try:
            run = host.area.new_run()
        except OSError as exc:
            return sandbox_error(f"could not create the run's directories: {exc}")
        argv, limits = command or run_command(language, runtime, memory_mb, cpu_time_s, s, host.cgroups)
        launch = self._new_launch(
            run=run, command=argv, limits=limits, memory_mb=memory_mb, stdin_pipe=stdin_pipe, extra_args=extra_args
        )
        try:
            cgroups = host.cgroups
            if cgroups is not None:
                try:
                    launch.cgroup_dirs = cgroups.create(memory_mb << 20, s.max_processes)
                except OSError as exc:
                    log.warning("could not create a cgroup for a run (%s); rlimits only", exc)
                    if cgroups.limits_memory and command is None:
                        launch.command, launch.limits = run_command(language, runtime, memory_mb, cpu_time_s, s, None)
                # A pre-started sandbox must be confined exactly like a cold one.
                launch.pooled = bool(launch.cgroup_dirs) or not cgroups.limits_memory
            t.mark("cgroup")
            await self._hold(launch, runtime, t)
            return launch
        except (OSError, subprocess.SubprocessError) as exc:
            await self.dispose(launch)
            return sandbox_error(f"could not start the sandbox: {exc}")
        except BaseException:
            await self.dispose(launch)
            raise

    async def dispose(self, launch: Launch) -> None:
        """Kill whatever is left of a sandbox and remove its cgroups and run dir."""
        await launch.close()
        cgroups = self.host.cgroups
        if cgroups is not None and launch.cgroup_dirs:
            await cgroups.aremove(launch.cgroup_dirs)
            launch.cgroup_dirs = []
        if launch.run is not None:
            run, launch.run = launch.run, None
            if run.mounted:
                self.host.area.release(run)  # unmounts: instant whatever the program left
            else:
                # A walk of whatever the program left (bounded by its file limits), off
                # the event loop so that other requests go on meanwhile.
                await asyncio.get_running_loop().run_in_executor(None, self.host.area.release, run)

    async def aclose(self) -> None:
        """Dispose of sandboxes started ahead of requests, then `close()`."""
        self.close()

    def close(self) -> None:
        """Stop what the launcher keeps running between runs."""
