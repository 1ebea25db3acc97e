"""Run one episode through tinker-cookbook's real rollout code and record what happened.

`mode=check` and `mode=eval` both need, per episode, the evaluation (binary) reward the
env gives, the shaped reward the training formula would give, every reward metric and the
stop reason. The env grades one way only, so the episode runs as the evaluation env
(binary: exactly what an eval or a training-time eval sees) and the shaped reward is
re-graded from the episode's final message history with the same `WorkspaceReward`.
Each record also counts the episode's tool-call failures (`piexp.transcripts.failures`)
and, unless asked not to, carries its transcript (`piexp.transcripts.capture`) for the
caller to store.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tinker_cookbook.completers import TokenCompleter
from tinker_cookbook.rl.rollouts import do_group_rollout
from tinker_cookbook.rl.types import Env, Trajectory

from piexp.env.episode import EpisodeSettings, InfrastructureFailure, WorkspaceGroupBuilder
from piexp.env.group_wrappers import GroupWrapper
from piexp.env.reward import REWARD_METRICS, WorkspaceReward, final_answer, tool_payloads
from piexp.tasks import Task
from piexp.transcripts.capture import build_transcript
from piexp.transcripts.failures import count_failures


@dataclass
class EpisodeRecord:
    policy: str
    task_id: str
    family: str
    split: str
    language: str
    sample: int
    reward: float = 0.0  # the env's reward (binary, as in evaluation)
    shaped: float = 0.0  # the training formula's reward for the same history
    metrics: dict[str, float] = field(default_factory=dict)  # every REWARD_METRICS key
    stop_reason: str | None = None
    turns: int = 0
    tool_calls: int = 0
    answer: str | None = None  # the final integer the policy stated
    expected: str | None = None  # the task's answer, beside the stated one wherever an episode is shown
    last_run: dict[str, Any] | None = None  # the last bash result (diagnostics)
    wall_s: float = 0.0
    error: str | None = None  # the rollout raised (nothing was graded)
    failures: dict[str, int] = field(default_factory=dict)  # tool-call failure counts (FAILURE_KINDS, calls)
    # The episode's transcript (not part of the record's JSON: stored in its own file).
    transcript: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # The error was the sandbox's, not the episode's: play it again (never recorded).
    infrastructure_failure: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def of(cls, policy: str, task: Task, language: str, sample: int = 0) -> EpisodeRecord:
        """The record, still empty, of `policy`'s episode `sample` on (task, language)."""
        return cls(
            policy=policy,
            task_id=task.task_id,
            family=task.family,
            split=task.split,
            language=language,
            sample=sample,
            expected=str(task.answer),
        )

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.task_id, self.language, self.sample)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["transcript"], data["infrastructure_failure"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpisodeRecord:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


@dataclass(frozen=True)
class _KeepEnvs(GroupWrapper):
    """The real group builder, keeping the envs it made, so the final message history can
    be read after the rollout."""

    envs: list[Env] = field(default_factory=list)

    async def make_envs(self) -> Sequence[Env]:
        self.envs[:] = await self.inner.make_envs()
        return self.envs


async def run_episode(
    policy: TokenCompleter,
    policy_name: str,
    task: Task,
    language: str,
    settings: EpisodeSettings,
    *,
    sample: int = 0,
    record_transcript: bool = True,
) -> EpisodeRecord:
    """One evaluation episode of `policy` on (task, language). Never raises for a failed
    rollout: the error is recorded, so one bad episode cannot hide the others.
    `record_transcript=False` leaves `record.transcript` None (bench/rollouts.py compares)."""
    record = EpisodeRecord.of(policy_name, task, language, sample)
    builder = _KeepEnvs(
        WorkspaceGroupBuilder(task=task, language=language, settings=settings, group_size=1, evaluation=True)
    )
    start = time.perf_counter()
    try:
        group = await do_group_rollout(builder, policy)
    except Exception as error:  # noqa: BLE001 - recorded, and reported by the caller
        record.error = f"{type(error).__name__}: {error}"
        record.infrastructure_failure = isinstance(error, InfrastructureFailure)
        record.metrics = {name: 0.0 for name in REWARD_METRICS}
        record.wall_s = time.perf_counter() - start
        record.last_run = {"traceback": traceback.format_exc(limit=6)[-2000:]}
        return record
    record.wall_s = time.perf_counter() - start
    env = builder.envs[0] if builder.envs else None
    fill_record(
        record,
        group.trajectories_G[0],
        float(group.get_total_rewards()[0]),
        env,
        task,
        settings,
        record_transcript=record_transcript,
    )
    return record


def fill_record(
    record: EpisodeRecord,
    trajectory: Trajectory,
    total: float,
    env: Env | None,
    task: Task,
    settings: EpisodeSettings,
    *,
    record_transcript: bool = True,
) -> None:
    """Fill `record` from a finished trajectory, its total reward and its env: `reward`
    the binary grade and `shaped` the shaped one of the same history (whichever the env
    graded with, the other is graded again), metrics, stop reason, failures, transcript."""
    final_metrics = dict(trajectory.transitions[-1].metrics) if trajectory.transitions else {}
    record.turns = len(trajectory.transitions)
    record.stop_reason = str(trajectory.stop_reason) if trajectory.stop_reason is not None else None
    history = _history(env) if env is not None else []
    payloads = tool_payloads(history)
    record.tool_calls = len(payloads)
    record.answer = final_answer(history)
    runs = [p for p in payloads if p.get("tool") == "bash"]
    if runs:
        record.last_run = {k: runs[-1].get(k) for k in ("status", "return_code", "stdout", "stderr", "error")}
    shaped, metrics = WorkspaceReward(task.answer, settings.reward.weights, binary=False).grade(history)
    binary, _ = WorkspaceReward(task.answer, settings.reward.weights, binary=True).grade(history)
    record.metrics = {name: float(metrics[name]) for name in REWARD_METRICS}
    if "functional_correct" in final_metrics:
        # The env graded this history (its last step's reward): each mode's grade instead.
        before = total - trajectory.transitions[-1].reward
        record.reward, record.shaped = before + binary, before + shaped
    else:
        # Ended before grading (context overflow, parse error): both modes give the
        # same terminal reward.
        record.reward = record.shaped = total
    record.failures = count_failures(history, (t.metrics for t in trajectory.transitions), record.stop_reason)
    if record_transcript:
        message_env = getattr(env, "message_env", None)
        prompt_messages = len(getattr(message_env, "initial_messages", None) or [])
        record.transcript = build_transcript(
            record, history, prompt_messages, trajectory.transitions, getattr(env, "renderer", None)
        )


def _history(env: Env) -> list[Any]:
    message_env = getattr(env, "message_env", None)
    return list(getattr(message_env, "history", None) or [])
