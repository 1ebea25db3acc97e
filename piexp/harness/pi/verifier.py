"""An imported Harbor task's phases in Pi's sandbox (docs/harbor.md#importing-tasks): its
oracle (`solution/solve.sh`) and its verifier (`tests/test.sh`), each run like one of the
model's commands (piexp.harness.pi.commands: the run user, namespaces, syscall filter,
cgroup and rlimits of its own) over the episode's workspace.

The workspace is Pi's `/sandbox`, also shown at the task's working folder (a symlink, so
`cd /app` and `/app/...` paths reach it). The verifier phase adds `tests/` read-only at
`/tests` and a fresh, capped `/logs/verifier` it writes its reward into; it runs
`bash /tests/test.sh` from the working folder with the environment's and `[verifier] env`
variables, for at most `[verifier] timeout_sec`. The oracle phase has `solution/`
read-only at `/solution` (and no `/tests`), and runs `bash /solution/solve.sh` with
`[solution] env` for at most `[agent] timeout_sec`, as Harbor's oracle agent does.
The reward is read from the log folder as Harbor reads it (piexp.harbor.reward_files).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
from dataclasses import dataclass
from typing import Any

from piexp.errors import RunIncompleteError
from piexp.harbor.reward_files import MISSPELLINGS, REWARD_JSON, REWARD_TXT, RewardRead, read_reward
from piexp.harbor.task_folder import HarborVerifier
from piexp.harness.pi.commands import command_env
from piexp.harness.pi.sandbox import BIN_DIR, PiSandbox, run_to_end
from piexp.sandbox.isolation.layout import SANDBOX_WORKDIR
from piexp.sandbox.isolation.rlimits import Limits
from piexp.sandbox.protocol import RunCodeResponse
from piexp.sandbox.run_dir import read_file, write_file
from piexp.sandbox.timings import Timings

LOGS = "/logs/verifier"
_REWARD_CAP = 1 << 20
_OUTPUT_CAP = 64 << 10


@dataclass
class Phase:
    """One phase's run: exit code (None: killed at its time limit), output tail, and what
    kept it from running (`error`: piexp's failure)."""

    returncode: int | None
    output: str
    timed_out: bool = False
    error: str | None = None


@dataclass
class VerifierOutcome:
    """The verifier's grade of one workspace: `read.reward` is the model's outcome; no
    reward (`read.problem`) or a phase piexp could not run (`error`) is piexp's."""

    read: RewardRead
    phase: Phase

    @property
    def error(self) -> str | None:
        if self.phase.error is not None:
            return f"the sandbox could not run the verifier: {self.phase.error}"
        if self.read.reward is None:
            timed_out = " (it was stopped at its timeout)" if self.phase.timed_out else ""
            return f"{self.read.problem}{timed_out}; test.sh said: {self.phase.output[-400:].strip() or 'nothing'}"
        return None


def workspace_link(verifier: HarborVerifier) -> tuple[str, ...]:
    """bwrap options that show the workspace at the task's working folder: for Pi's
    sandbox, its commands' and every phase. (The task's environment variables are its
    commands' and phases' only: Pi is piexp's, not the image's, and keeps its own.)"""
    return ("--symlink", SANDBOX_WORKDIR, verifier.workdir) if verifier.workdir != SANDBOX_WORKDIR else ()


def staged(sandbox: PiSandbox, verifier: HarborVerifier, part: str) -> str:
    """The task's `part` folder (tests, solution) copied into the run area, readable by the
    run user wherever the task folder lies (one copy per task digest)."""
    area = sandbox.runner.host.area.path
    target = os.path.join(area, f"harbor-{verifier.digest.removeprefix('sha256:')[:24]}", part)
    if not os.path.isdir(target):
        partial = f"{target}.{os.getpid()}.{os.urandom(4).hex()}.part"  # one per caller: episodes stage at once
        shutil.copytree(os.path.join(verifier.folder, part), partial, symlinks=False, dirs_exist_ok=True)
        for root, dirs, files in os.walk(partial):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o755 if name.endswith(".sh") else 0o644)
        os.chmod(os.path.dirname(partial), 0o755)
        try:
            os.rename(partial, target)
        except OSError:  # another episode staged it first
            shutil.rmtree(partial, ignore_errors=True)
    return target


async def run_phase(
    sandbox: PiSandbox,
    verifier: HarborVerifier,
    workspace: str,
    script: str,
    binds: tuple[str, ...],
    env: tuple[tuple[str, str], ...],
    *,
    timeout_s: float,
    memory_mb: int,
    max_processes: int,
) -> Phase:
    """`bash <script>` from the working folder over `workspace`, in a sandbox of its own."""
    host, settings = sandbox.runner.host, sandbox.runner.settings
    limits = Limits(
        cpu_time_s=max(1, int(timeout_s) + 1),
        file_size_bytes=settings.max_file_size_mb << 20,
        open_files=max(settings.max_open_files, 1024),
        processes=None if host.cgroups is not None and host.cgroups.limits_pids else max_processes,
    )
    variables = {**dict(env), **command_env(BIN_DIR)}
    extra = (
        *sandbox.runtime_binds(),
        "--bind", workspace, SANDBOX_WORKDIR,
        *workspace_link(verifier),
        *binds,
        *[arg for name, value in variables.items() for arg in ("--setenv", name, value)],
    )  # fmt: skip
    language, runtime = next((lang, rt) for lang, rt in host.runtimes.items() if rt is not None)
    command = f"cd {shlex.quote(verifier.workdir)} && exec bash {script}"
    prepared = await sandbox.launcher.prepare(
        language, runtime, memory_mb, limits.cpu_time_s, False, Timings(),
        command=(["/bin/bash", "-c", command], limits), extra_args=extra,
    )  # fmt: skip
    if isinstance(prepared, RunCodeResponse):
        return Phase(None, "", error=str(prepared.message or prepared))
    launch = prepared
    try:
        returncode, stdout, stderr, timed_out = await run_to_end(launch, limits, timeout_s, _OUTPUT_CAP, _OUTPUT_CAP)
    finally:
        await asyncio.shield(sandbox.launcher.dispose(launch))
    if launch.error is not None:
        return Phase(None, "", error=f"{launch.error}: {stderr.decode('utf-8', errors='replace').strip()[-300:]}")
    return Phase(returncode, (stdout + stderr).decode("utf-8", errors="replace"), timed_out=timed_out)


async def run_oracle(sandbox: PiSandbox, verifier: HarborVerifier, workspace: str, *, memory_mb: int,
                     max_processes: int) -> Phase:  # fmt: skip
    """The task's solution/solve.sh over `workspace` (the check's oracle)."""
    solution = staged(sandbox, verifier, "solution")
    return await run_phase(
        sandbox, verifier, workspace, "/solution/solve.sh", ("--ro-bind", solution, "/solution"),
        verifier.solution_env, timeout_s=verifier.agent_timeout_s, memory_mb=memory_mb, max_processes=max_processes,
    )  # fmt: skip


async def run_verifier(
    sandbox: PiSandbox, verifier: HarborVerifier, workspace: str, *, memory_mb: int, max_processes: int
) -> VerifierOutcome:
    """The task's tests/test.sh over `workspace`, and the reward it wrote."""
    tests = staged(sandbox, verifier, "tests")
    area = sandbox.runner.host.area
    logs = area.new_run(with_tmp=False)
    try:
        phase = await run_phase(
            sandbox, verifier, workspace, "/tests/test.sh", ("--ro-bind", tests, "/tests", "--bind", logs.work, LOGS),
            verifier.env, timeout_s=verifier.timeout_s, memory_mb=memory_mb, max_processes=max_processes,
        )  # fmt: skip
        names = (REWARD_JSON, REWARD_TXT, *MISSPELLINGS)
        files = {name: read_file(logs.work, name, _REWARD_CAP) for name in names}
    finally:
        area.release(logs)
    return VerifierOutcome(read_reward(files), phase)


async def prove_tasks(sandbox: PiSandbox, tasks: list, *, memory_mb: int, max_processes: int) -> list[str]:
    """Each task's oracle then verifier must give reward 1 and its verifier on the
    untouched workspace (a no-op agent) reward 0, as Harbor's "oracle 1, no-op 0" gate;
    what is wrong, one sentence per task. Four tasks at once. A phase the sandbox could
    not run is piexp's failure, not the task's: `RunIncompleteError`, naming it."""
    gate = asyncio.Semaphore(4)
    host = sandbox.runner.host
    unrun: list[str] = []

    async def graded(task: Any, oracle: bool) -> tuple[Phase | None, VerifierOutcome]:
        run = host.area.new_run(with_tmp=False)
        try:
            for name, text in task.files.items():
                write_file(run.work, name, text.encode(), host.run_user)
            solved = None
            if oracle:
                solved = await run_oracle(sandbox, task.verifier, run.work, memory_mb=memory_mb,
                                          max_processes=max_processes)  # fmt: skip
            return solved, await run_verifier(sandbox, task.verifier, run.work, memory_mb=memory_mb,
                                              max_processes=max_processes)  # fmt: skip
        finally:
            host.area.release(run)

    async def prove(task: Any) -> str | None:
        name = f"task {task.verifier.name} ({task.verifier.folder})"
        async with gate:
            solved, outcome = await graded(task, oracle=True)
            noop = (await graded(task, oracle=False))[1]
        failed = next((phase.error for phase in (solved, outcome.phase, noop.phase) if phase and phase.error), None)
        if failed is not None:
            unrun.append(f"{name}: {failed}")
            return None
        if solved is not None and solved.returncode != 0:
            said = f"exit {solved.returncode}{' (its timeout)' if solved.timed_out else ''}"
            return f"{name}: its solution/solve.sh failed ({said}): {solved.output[-300:].strip() or 'no output'}"
        for outcome_of, run, want in (("after solution/solve.sh", outcome, 1.0), ("with nothing done", noop, 0.0)):
            if run.error is not None:
                return f"{name}: {outcome_of}, {run.error}"
            if run.read.reward != want:
                return f"{name}: {outcome_of}, its verifier gave reward {run.read.reward:g}, not {want:g}"
        return None

    found = await asyncio.gather(*(prove(task) for task in tasks))
    if unrun:
        raise RunIncompleteError(
            f"piexp's sandbox could not run the scripts of {len(unrun)} Harbor task(s) while proving them solvable "
            f"(first: {unrun[0]}). This is piexp's failure, not the tasks'; nothing was written. Run the same "
            "command again once the sandbox is healthy."
        )
    return [problem for problem in found if problem is not None]
