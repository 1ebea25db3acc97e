"""The unisolated launcher, only with `sandbox.allow_unisolated` where bubblewrap is
missing: the program runs as a plain child of the server in its run directory, with the
server's privileges and filesystem, limited only by its rlimits and cgroups and killed
with the server.

Where the spawner thread can join the run's cgroups by itself (cgroup v1) or the run has
none, no Python runs in the forked child: util-linux's prlimit and setpriv, exec'd in
place before the program, set its rlimits and parent-death signal, and the child starts
inside the cgroups its parent thread joined (`process.limits_exec_prefix`: a preexec
function can deadlock the child of the threaded server). Under cgroup v2 a join would
move the whole server, so the program joins its cgroups from a preexec function, before
it runs, as it must."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Optional

from ..isolation.cgroups import Cgroups
from ..isolation.layout import Runtime, launcher_env
from ..isolation.process import kill_process_group, limits_exec_prefix, make_preexec
from ..isolation.rlimits import Limits
from ..protocol import CommandRunResult, CommandRunStatus
from ..spawn import Spawner
from ..timings import Timings
from .base import Launch, Launcher, StartFailed


@dataclass(eq=False)
class UnisolatedLaunch(Launch):
    spawner: Optional[Spawner] = None  # the server's, which starts the program
    cgroups: Optional[Cgroups] = None  # the server's, which made `cgroup_dirs`

    async def start(self, limits: Limits, timeout: float) -> None:
        assert self.spawner is not None  # set by the launcher that made this launch
        spawner, cgroups = self.spawner, self.cgroups
        thread_joins = cgroups is not None and cgroups.joins_per_thread and spawner.joins_cgroups
        try:
            if self.cgroup_dirs and not thread_joins:
                argv, join, preexec = self.command, [], make_preexec(limits, self.cgroup_dirs)
            else:
                argv, preexec = [*limits_exec_prefix(limits), *self.command], None
                join = cgroups.self_join_files(self.cgroup_dirs) if cgroups is not None and self.cgroup_dirs else []
            self.proc = await spawner.spawn(
                argv,
                env={**launcher_env(), "HOME": self.run_dir},
                cwd=self.run_dir,
                stdin_pipe=self.stdin_pipe,
                join_tasks=join,
                preexec_fn=preexec,
            )
            if join and not self.proc.joined_cgroups:  # never a program outside its cgroups
                kill_process_group(self.proc.pid)
                raise OSError("the program could not be started inside its cgroups")
        except (OSError, subprocess.SubprocessError) as exc:
            raise StartFailed(
                CommandRunResult(status=CommandRunStatus.error, execution_time=0.0, stderr=f"could not start: {exc}")
            ) from exc


class UnisolatedLauncher(Launcher):
    name = "unisolated"

    def _new_launch(self, **fields) -> UnisolatedLaunch:
        return UnisolatedLaunch(**fields, spawner=self.host.spawner, cgroups=self.host.cgroups)

    async def _hold(self, launch: Launch, runtime: Runtime, t: Timings) -> None:
        """Nothing starts before the files."""
