"""The reference environment as a harness: tinker-cookbook's rollout of piexp's own
WorkspaceEnv (piexp.env), its four Pi-shaped tools with JSON results, the prompt of
piexp.env.prompt. What every run did before harnesses were configurable, unchanged."""

from __future__ import annotations

from tinker_cookbook.completers import TokenCompleter
from tinker_cookbook.renderers import Renderer
from tinker_cookbook.rl.types import Env

from piexp.env.episode import EpisodeSettings, build_workspace_env
from piexp.harness.base import Harness
from piexp.policies.rollout import EpisodeRecord, run_episode
from piexp.tasks import Task


class BuiltinHarness(Harness):
    name = "builtin"
    trains = True

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
