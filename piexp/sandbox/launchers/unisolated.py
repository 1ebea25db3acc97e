"""The unisolated launcher, only with `sandbox.allow_unisolated` where bubblewrap is
missing: the program runs as a plain child of the server in its run directory, with the
server's privileges and filesystem, limited only by its rlimits and cgroups (set in a
preexec function) and killed with the server."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Optional

from ..isolation.layout import Runtime, launcher_env
from ..isolation.process import make_preexec
from ..isolation.rlimits import Limits
from ..protocol import CommandRunResult, CommandRunStatus
from ..spawn import Spawner
from ..timings import Timings
from .base import Launch, Launcher, StartFailed


@dataclass(eq=False)
class UnisolatedLaunch(Launch):
    spawner: Optional[Spawner] = None  # the server's, which starts the program

    async def start(self, limits: Limits, timeout: float) -> None:
        assert self.spawner is not None  # set by the launcher that made this launch
        try:
            self.proc = await self.spawner.spawn(
                self.command,
                env={**launcher_env(), "HOME": self.run_dir},
                cwd=self.run_dir,
                stdin_pipe=self.stdin_pipe,
                preexec_fn=make_preexec(limits, self.cgroup_dirs),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise StartFailed(
                CommandRunResult(status=CommandRunStatus.error, execution_time=0.0, stderr=f"could not start: {exc}")
            ) from exc


class UnisolatedLauncher(Launcher):
    name = "unisolated"

    def _new_launch(self, **fields) -> UnisolatedLaunch:
        return UnisolatedLaunch(**fields, spawner=self.host.spawner)

    async def _hold(self, launch: Launch, runtime: Runtime, t: Timings) -> None:
        """Nothing starts before the files."""
