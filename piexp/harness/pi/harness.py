"""`harness=pi`: the real Pi coding agent plays each episode (docs/harness.md).

An episode is one `pi --print` process started in the task's workspace inside piexp's
sandbox (piexp.harness.pi.sandbox) with the reference environment's prompt
(piexp.env.prompt) as its message, talking to one model endpoint of its own
(piexp.harness.endpoint) answered by the episode's policy. Its reward is graded from
Pi's JSON events (piexp.harness.pi.trace).

Limits: `limits.max_turns` model calls and `limits.max_tool_calls` tool calls per
episode (a request past either is refused, Pi stops, and the episode is graded with that
stop reason, as in the reference environment); `options.wall_time_s` of wall time, past
which Pi is killed. Killed while a command the model gave Pi's shell was still running,
the episode is the model's: graded with stop reason `wall_time`. The model's commands
run in sandboxes of their own (piexp.harness.pi.commands): they cannot kill Pi, write
its memory or take its memory, so a Pi that was killed at the wall limit otherwise (Pi
itself hung, or its endpoint did not answer), exited without finishing its run (a
crash, a dead endpoint) or could not be started is piexp's failure, not the policy's:
the record is an infrastructure failure, played again, never scored.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tinker_cookbook.completers import TokenCompleter
from tinker_cookbook.renderers import Renderer
from tinker_cookbook.rl.types import Env

from piexp.config.schema import HarnessSettings, LanguageSettings, RunConfig
from piexp.env.episode import EpisodeSettings
from piexp.env.prompt import workspace_prompt
from piexp.env.reward import REWARD_METRICS
from piexp.errors import UserError
from piexp.languages import LANGUAGES
from piexp.harness.base import Harness
from piexp.harness.endpoint import EpisodeEndpoint, LimitReached, Responder
from piexp.harness.pi.model import chat_history, shown_history
from piexp.harness.pi.install import PiInstall, find_install, install_dir, locked_versions
from piexp.harness.pi.options import (
    MEMORY_SHARE,
    PiOptions,
    available_memory_mb,
    episode_memory_mb,
    slot_limits,
    validated_options,
)
from piexp.harness.pi.sandbox import PiSandbox, dump_models_json, pi_argv
from piexp.harness.pi.scripted import ScriptedResponder, VerifiedTaskResponder
from piexp.harness.pi.slot import WarmSlots
from piexp.harness.pi.trace import PiTrace, grade, parse_events, stated_answer
from piexp.harness.pi.verifier import VerifierOutcome, prove_tasks, run_verifier, staged, workspace_link
from piexp.policies.rollout import EpisodeRecord
from piexp.policies.scripted import OraclePolicy, ScriptedPolicy
from piexp.sandbox.isolation.layout import resolve_runtime
from piexp.sandbox.protocol import PROTOCOL_LANGUAGES
from piexp.sandbox.settings import SandboxSettings as ServerSettings
from piexp.tasks import Task
from piexp.transcripts.capture import finalize

MODEL_ID = "piexp-policy"  # the model name Pi is given (it appears in PI_MODEL, not in the prompt)


class PiHarness(Harness):
    name = "pi"
    trains = True
    replays = True
    plays_verified_tasks = True

    def __init__(self, settings: HarnessSettings) -> None:
        super().__init__(settings)
        self.options = PiOptions.model_validate(settings.options)
        found = find_install(self.options.version)
        assert found is not None, "refuse_unusable runs first"
        self.install: PiInstall = found
        self._sandbox: PiSandbox | None = None
        self._sandbox_lock = asyncio.Lock()
        # Episodes at once, at most as many as the machine's memory holds: a training
        # batch starts all its episodes together (groups x group size), the eval split
        # too; the rest wait for a slot.
        available, each_mb = available_memory_mb(), episode_memory_mb(self.options)
        at_once = max(1, int(MEMORY_SHARE * available // each_mb)) if available is not None else 64
        self._slots = asyncio.Semaphore(at_once)
        self._warm = WarmSlots(MODEL_ID, slot_limits(self.options), at_once) if self.options.warm else None

    @classmethod
    def refuse_unusable(cls, settings: HarnessSettings) -> None:
        options = validated_options(settings)
        pinned = locked_versions()
        if options.version != pinned["pi"] or options.node_version != pinned["node"]:
            raise UserError(
                f"harness=pi asks for Pi {options.version} on node {options.node_version}, but this piexp pins "
                f"Pi {pinned['pi']} on node {pinned['node']} (piexp/harness/pi/npm/package-lock.json); another "
                "Pi version needs that lockfile changed and `make setup` run again."
            )
        if find_install(options.version) is None:
            raise UserError(
                f"harness=pi needs Pi {options.version} with node {options.node_version}, which is not installed "
                f"in {install_dir(options.version)}. Run `make setup` (or `python -m piexp.harness.pi install`): it "
                "installs them from the npm registry with the committed lockfile; runs never install anything."
            )

    @classmethod
    def refuse_missing_runtimes(cls, settings: HarnessSettings, languages: Mapping[str, LanguageSettings]) -> None:
        for name, language in languages.items():
            protocol_id = language.sandbox_language or LANGUAGES[name].sandbox_id
            binary = PROTOCOL_LANGUAGES[protocol_id].binary
            if resolve_runtime(binary) is None:
                raise UserError(
                    f"harness=pi runs the {name} programs of this run with `{binary}` in its own sandbox on this "
                    f"machine, and `{binary}` is not installed here (not on PATH). Install {binary}, or drop {name} "
                    "from lang and eval_lang."
                )

    @classmethod
    def refuse_concurrency(cls, settings: HarnessSettings, concurrency: int) -> None:
        available = available_memory_mb()
        if available is None:
            return
        options = validated_options(settings)
        each_mb = episode_memory_mb(options)
        needed = concurrency * each_mb
        if needed > MEMORY_SHARE * available:
            fits = max(1, int(MEMORY_SHARE * available // each_mb))
            each = (
                f"a warm slot is counted at its recycling size, harness.options.slot_rss_mb={each_mb}"
                if options.warm
                else f"a Pi episode holds about {each_mb} MB, bench/harness.py"
            )
            raise UserError(
                f"harness=pi with mode.max_concurrency={concurrency} would hold about {needed / 1024:.1f} GB at once "
                f"({each}), more than "
                f"{MEMORY_SHARE:.0%} of the {available / 1024:.1f} GB this machine has available: its episodes would "
                f"be killed for memory. Set mode.max_concurrency={fits} or less."
            )

    def manifest(self) -> dict[str, Any]:
        return {
            **super().manifest(),
            "pi_version": self.install.pi_version,
            "node_version": self.install.node_version,
        }

    async def _ready_sandbox(self, settings: EpisodeSettings) -> PiSandbox:
        async with self._sandbox_lock:
            if self._sandbox is None:
                server = ServerSettings(max_processes=self.options.max_processes)
                commands = {
                    command: language.sandbox_language or LANGUAGES[name].sandbox_id
                    for name, language in settings.languages.items()
                    if language.sandbox_language or name in LANGUAGES
                    for command in language.runtimes
                }
                cap = self.options.output_cap_mb << 20
                loop = asyncio.get_running_loop()
                self._sandbox = await loop.run_in_executor(
                    None, lambda: PiSandbox(self.install, server, output_cap_bytes=cap, commands=commands)
                )
            return self._sandbox

    async def prove_verified(self, tasks: Sequence[Task], config: RunConfig) -> list[str]:
        from piexp.env.dataset import episode_settings

        sandbox = await self._ready_sandbox(episode_settings(config, ""))
        return await prove_tasks(sandbox, [task for task in tasks if task.verifier is not None],
                                 memory_mb=self.options.memory_mb, max_processes=self.options.max_processes)  # fmt: skip

    async def aclose(self) -> None:
        if self._warm is not None:
            await self._warm.aclose()
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            await sandbox.aclose()

    def training_env(
        self, task: Task, language: str, settings: EpisodeSettings, renderer: Renderer, *, evaluation: bool
    ) -> Env:
        from piexp.harness.pi.env import PiEpisodeEnv

        return PiEpisodeEnv(self, task, language, settings, renderer, evaluation=evaluation)

    async def scripted_trajectories(
        self, config: RunConfig, sandbox_url: str, tasks: Sequence[Task], policies: Sequence[str], progress: Any = None
    ) -> tuple[list[Any], list[float]]:
        from piexp.harness.pi.env import endpoint_trajectories

        return await endpoint_trajectories(self, config, sandbox_url, tasks, policies, progress)

    def responder(self, policy: TokenCompleter, settings: EpisodeSettings, task: Task | None = None) -> Responder:
        """The endpoint's answerer for `policy` in one episode: a scripted policy reads
        Pi's requests directly (on a task graded by its own verifier, it plays the task's
        oracle or a no-op); any other token completer (the `model` policy) samples them
        rendered with the run's renderer, recording each call's tokens."""
        if isinstance(policy, ScriptedPolicy):
            if task is not None and task.verifier is not None:
                return VerifiedTaskResponder(policy.name, task.verifier)
            return ScriptedResponder(policy)
        from piexp.env.episode import get_run_renderer
        from piexp.harness.pi.model import ModelResponder

        from piexp.harness.pi.scoring import scoring_rule

        renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
        return ModelResponder(policy, renderer, settings.limits, scoring_rule(settings))

    async def play(
        self,
        policy: TokenCompleter,
        policy_name: str,
        task: Task,
        language: str,
        settings: EpisodeSettings,
        *,
        sample: int = 0,
        record_transcript: bool = True,
    ) -> EpisodeRecord:
        try:
            responder = self.responder(policy, settings, task)
        except ValueError as error:  # a scripted policy that cannot play this task
            record = EpisodeRecord.of(policy_name, task, language, sample)
            record.error = f"the policy cannot play this task: {error}"
            return record
        record = await self.play_responder(
            responder, policy_name, task, language, settings, sample=sample, record_transcript=record_transcript
        )
        rule = getattr(responder, "scoring", None)
        if rule is not None:
            rule.settle(record)  # the endings Pi's trace does not grade, as the reference environment scores them
        return record

    async def play_responder(
        self,
        responder: Responder,
        policy_name: str,
        task: Task,
        language: str,
        settings: EpisodeSettings,
        *,
        sample: int = 0,
        record_transcript: bool = True,
    ) -> EpisodeRecord:
        """`play` with the endpoint answered by `responder` (a policy's, or a test's)."""
        record = EpisodeRecord.of(policy_name, task, language, sample)
        record.metrics = {name: 0.0 for name in REWARD_METRICS}
        started = time.perf_counter()
        try:
            sandbox = await self._ready_sandbox(settings)
        except (RuntimeError, OSError) as error:
            record.error = f"the sandbox for Pi could not be set up: {type(error).__name__}: {error}"
            record.infrastructure_failure = True
            return record
        language_settings = settings.languages[language]
        verifier = task.verifier
        # A task graded by its own verifier (an imported Harbor task) is asked its own
        # instruction, in a workspace shown at its working folder, and graded by its
        # tests/test.sh on the workspace Pi left (piexp.harness.pi.verifier).
        prompt = task.instruction if verifier is not None else workspace_prompt(task, language, language_settings)
        layout: tuple[str, ...] = ()
        verify = None
        task_env = dict(verifier.environment_env) if verifier is not None else None
        if verifier is not None:
            layout = workspace_link(verifier)
            if policy_name == OraclePolicy.name:
                # The oracle's commands (played, replayed or imitated) run its solution/solve.sh.
                layout = (*layout, "--ro-bind", staged(sandbox, verifier, "solution"), "/solution")

            def verify(work: str) -> Any:
                return run_verifier(sandbox, verifier, work, memory_mb=self.options.memory_mb,
                                    max_processes=self.options.max_processes)  # fmt: skip

        agent_files = {"models.json": dump_models_json(MODEL_ID)}
        if self._warm is not None:
            async with self._slots:
                limited = _limited(responder, settings)
                run, endpoint = await self._warm.play(
                    sandbox,
                    lambda path: EpisodeEndpoint(path, limited, model=MODEL_ID),
                    prompt,
                    dict(task.files),
                    agent_files,
                    layout,
                    verify,
                    task_env,
                )
        else:
            dirs = sandbox.episode_dirs()
            endpoint = EpisodeEndpoint(
                os.path.join(dirs[1], "endpoint.sock"), _limited(responder, settings), model=MODEL_ID
            )
            try:
                await endpoint.start()
                async with self._slots:
                    run = await sandbox.run(
                        pi_argv(self.install, MODEL_ID, prompt),
                        dict(task.files),
                        agent_files,
                        dirs,
                        memory_mb=self.options.memory_mb,
                        max_processes=self.options.max_processes,
                        wall_time_s=self.options.wall_time_s,
                        layout=layout,
                        verify=verify,
                        task_env=task_env,
                    )
            finally:
                await endpoint.close()
                sandbox.release_dirs(dirs)
        record.wall_s = time.perf_counter() - started
        if endpoint.fatal is not None:
            raise endpoint.fatal  # e.g. the model service is gone: the run stops (resumable)
        trace = parse_events(run.stdout)
        failed = next((call.error for call in endpoint.calls if call.error and not call.limit), None)
        limit = next((call.limit for call in endpoint.calls if call.limit), None)
        stderr_tail = run.stderr.decode("utf-8", errors="replace").strip()[-1500:]
        pending = next(
            (call for call in endpoint.calls if call.response is None and not call.error and not call.limit), None
        )
        if run.timed_out and pending is None and trace.running_tool is not None:
            # The model's own command outlived the episode (Pi's shell has no time limit
            # of its own): the episode's outcome, graded with what it did before.
            limit = "wall_time"
        if run.error is not None:
            problem = f"the sandbox could not run Pi: {run.error}"
        elif run.timed_out and limit != "wall_time":
            problem = f"Pi did not finish within harness.options.wall_time_s={self.options.wall_time_s:g} s"
        elif run.oom_killed and limit is None:
            problem = f"Pi's episode exceeded harness.options.memory_mb={self.options.memory_mb}"
        elif failed is not None:
            # The policy itself failed (a scripted policy given a prompt it cannot read):
            # like a rollout that raised, recorded and not scored.
            record.error = f"the policy failed answering Pi: {failed}"
            record.last_run = {"stderr": stderr_tail}
            return record
        elif limit is None and (run.returncode != 0 or not trace.ended):
            problem = f"Pi exited with code {run.returncode} before finishing its run: {stderr_tail or 'no output'}"
        elif limit is None and trace.stop_reason in ("error", "aborted"):
            # Pi ended its run on a failed model call (the endpoint died or broke the
            # protocol), after its own retries: no answer of the model's ended it.
            problem = f"Pi's model call failed ({trace.stop_reason}): {trace.error_message or 'no message'}"
        elif verifier is not None and (run.graded is None or run.graded.error is not None):
            # The verifier did not grade the workspace (no reward file, a reward that is no
            # finite number, its sandbox failed): Harbor's verifier error, not the model's 0.
            problem = f"task {verifier.name}'s verifier did not grade the episode: " + (
                run.graded.error if run.graded is not None else "it did not run"
            )
        else:
            problem = None
        if problem is not None:
            record.error = problem
            record.infrastructure_failure = True
            record.last_run = {"stderr": stderr_tail}
            return record
        self._fill(record, trace, task, language_settings, settings, limit, endpoint, record_transcript)
        if verifier is not None:
            graded_by_verifier(record, run.graded, verifier)
        view = getattr(responder, "view", None)
        if record.transcript is not None and view is not None:
            view.show(record.transcript, responder.calls, record.reward)  # type: ignore[attr-defined]
        return record

    def _fill(
        self,
        record: EpisodeRecord,
        trace: PiTrace,
        task: Task,
        language: Any,
        settings: EpisodeSettings,
        limit: str | None,
        endpoint: EpisodeEndpoint,
        record_transcript: bool,
    ) -> None:
        if task.verifier is None:
            weights = settings.reward.weights
            record.reward, metrics = grade(trace, task.answer, language, weights, binary=True)
            record.shaped, _ = grade(trace, task.answer, language, weights, binary=False)
            record.metrics = metrics
        record.turns = sum(1 for call in endpoint.calls if call.response is not None)
        record.tool_calls = len(trace.tool_runs)
        record.answer = stated_answer(trace)
        record.stop_reason = limit or "completed"
        bash = [r for r in trace.tool_runs if r.tool == "bash"]
        if bash:
            last = bash[-1]
            record.last_run = {"command": last.arguments.get("command"), "return_code": last.exit_code,
                               "stdout": (last.output or last.text)[-2000:]}  # fmt: skip
        record.failures = _failures(trace, record.stop_reason)
        if record_transcript:
            record.transcript = _transcript(record, endpoint)


def graded_by_verifier(record: EpisodeRecord, outcome: VerifierOutcome, verifier: Any) -> None:
    """The record of an episode its task's verifier graded: the reward it wrote, in
    binary and shaped mode alike (a Harbor task has one reward); `functional_correct`
    when it is 1; the verifier's rewards and output in the transcript."""
    reward = float(outcome.read.reward or 0.0)
    record.reward = record.shaped = reward
    record.metrics = {name: 0.0 for name in REWARD_METRICS}
    record.metrics["functional_correct"] = float(reward == 1.0)
    record.last_run = {**(record.last_run or {}), "verifier_output": outcome.phase.output[-2000:]}
    if record.transcript is not None:
        record.transcript.update(reward=reward, shaped=reward, metrics=record.metrics, verifier={
            **verifier.describe(), "rewards": outcome.read.rewards, "source": outcome.read.source,
            "exit_code": outcome.phase.returncode, "output": outcome.phase.output[-4000:],
        })  # fmt: skip
        if record.transcript.get("turns"):
            record.transcript["turns"][-1]["reward"] = reward


def _limited(responder: Responder, settings: EpisodeSettings) -> Responder:
    """`responder` under the episode's turn and tool-call limits, counted both in the
    history a request carries and at the endpoint (every request answered so far in the
    episode, and the tool calls of those answers), whoever sent it: a request with a
    short history of its own is answered no further past the limits than Pi's."""
    limits = settings.limits
    answered = {"turns": 0, "calls": 0}

    async def respond(body: dict[str, Any]) -> dict[str, Any]:
        messages = list(body.get("messages") or [])
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        calls = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
        if max(turns, answered["turns"]) >= limits.max_turns:
            raise LimitReached("max_turns")
        if max(calls, answered["calls"]) >= limits.max_tool_calls:
            raise LimitReached("max_tool_calls")
        answered["turns"] += 1
        answer = await responder(body)
        answered["calls"] += len(answer.get("tool_calls") or [])
        return answer

    return respond


def _failures(trace: PiTrace, stop_reason: str | None) -> dict[str, int]:
    """The reference environment's failure counts, for what Pi's tools report: a failed
    read, write or edit is a `tool_error`; Pi's shell refuses no command."""
    from piexp.transcripts.failures import FAILURE_KINDS

    counts = dict.fromkeys(FAILURE_KINDS, 0)
    counts["calls"] = len(trace.tool_runs)
    counts["tool_error"] = sum(1 for r in trace.tool_runs if r.tool in ("read", "write", "edit") and r.is_error)
    counts["unknown_tool"] = sum(1 for r in trace.tool_runs if r.tool not in ("read", "write", "edit", "bash"))
    if stop_reason in ("max_turns", "max_tool_calls"):
        counts[stop_reason] += 1
    return counts


def _transcript(record: EpisodeRecord, endpoint: EpisodeEndpoint) -> dict[str, Any]:
    """The episode as piexp's transcripts show it: the prompt Pi sent (its system prompt
    and the user message), then each assistant turn and tool result, from the last
    request Pi made plus the last answer."""
    answered = [call for call in endpoint.calls if call.response is not None]
    messages: list[dict[str, Any]] = list(answered[-1].request.get("messages") or []) if answered else []
    last = answered[-1].response if answered else None
    if last is not None:
        messages.append({"role": "assistant", **last})
    prompt, conversation = shown_history(chat_history(messages))
    turns = [
        {"turn": i, "prompt_tokens": 0, "sampled_tokens": 0, "reward": record.reward if i == len(answered) - 1 else 0.0}
        for i in range(len(answered))
    ]
    return finalize(
        {
            "version": 1,
            "harness": "pi",
            "policy": record.policy,
            "task_id": record.task_id,
            "family": record.family,
            "split": record.split,
            "language": record.language,
            "sample": record.sample,
            "prompt": prompt,
            "conversation": conversation,
            "turns": turns,
            "answer": record.answer,
            "expected": record.expected,
            "reward": record.reward,
            "shaped": record.shaped,
            "metrics": record.metrics,
            "stop_reason": record.stop_reason,
            "failures": record.failures,
            "wall_s": round(record.wall_s, 4),
            "tokens": {"prompt_last": 0, "sampled": 0},
        }
    )
