"""The reference environment as a harness: tinker-cookbook's rollout of piexp's own
WorkspaceEnv (piexp.env), its four Pi-shaped tools with JSON results, the prompt of
piexp.env.prompt. What every run did before harnesses were configurable, unchanged."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tinker_cookbook.completers import TokenCompleter
from tinker_cookbook.renderers import Renderer
from tinker_cookbook.renderers.base import Message
from tinker_cookbook.rl.types import Env

from piexp.config.schema import RewardSettings, RunConfig
from piexp.env.episode import EpisodeSettings, build_workspace_env
from piexp.env.reward import UNGRADED_ENDINGS, WorkspaceReward
from piexp.harness.base import Harness
from piexp.policies.rollout import EpisodeRecord, run_episode
from piexp.tasks import Task


class BuiltinHarness(Harness):
    name = "builtin"
    trains = True
    replays = True
    recorded_in_runs = False

    def progress_label(self, activity: str) -> str:
        return activity  # the reference environment: what every run did before harnesses

    async def scripted_trajectories(
        self, config: RunConfig, sandbox_url: str, tasks: Sequence[Task], policies: Sequence[str], progress: Any = None
    ) -> tuple[list[Any], list[float]]:
        """The reference environment's own scripted episodes (its prompt, tools, results)."""
        from piexp.pretrain.data import scripted_trajectories

        return await scripted_trajectories(config, sandbox_url, tasks, policies, progress)

    @classmethod
    def rescored_reward(cls, transcript: dict[str, Any], answer: str, reward: RewardSettings, *, binary: bool) -> float:
        """Regraded by today's `WorkspaceReward` from the recorded conversation (the JSON
        tool results it got, the answer it stated): a change to the reward code shows."""
        turns = transcript.get("turns") or []
        last_flags = (turns[-1].get("flags") or {}) if turns else {}
        if any(last_flags.get(name) for name in UNGRADED_ENDINGS):
            return float(transcript["reward"])  # ended before grading: the same in both modes
        earlier = sum(float(turn.get("reward") or 0.0) for turn in turns[:-1])
        grade, _metrics = WorkspaceReward(answer, reward.weights, binary=binary).grade(recorded_history(transcript))
        return earlier + grade

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
        return await run_episode(
            policy, policy_name, task, language, settings, sample=sample, record_transcript=record_transcript
        )

    def training_env(
        self, task: Task, language: str, settings: EpisodeSettings, renderer: Renderer, *, evaluation: bool
    ) -> Env:
        return build_workspace_env(
            task=task, language=language, settings=settings, renderer=renderer, evaluation=evaluation
        )


def recorded_history(transcript: dict[str, Any]) -> list[Message]:
    """The episode's message history as the reward read it: the prompt and the
    conversation, tool results as the JSON text the tools answered (sorted keys);
    messages the env never put in its history are left out."""
    history: list[Message] = []
    for message in [*transcript.get("prompt", []), *transcript.get("conversation", [])]:
        role = message.get("role")
        if role not in ("system", "user", "assistant", "tool") or message.get("not_in_history"):
            continue
        if role == "tool" and "result" in message:
            content = json.dumps(message["result"], sort_keys=True)
        else:
            content = str(message.get("text", ""))
        history.append({"role": role, "content": content})
    return history
