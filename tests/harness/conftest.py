"""Shared pieces of the harness tests: the real Pi from piexp's cache (`make setup`
installs it; the tests skip, saying so, where it is not installed), episode settings, and
a helper that plays episodes through one harness in one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from piexp.config.defaults import default_settings
from piexp.config.schema import HarnessSettings, LanguageSettings, Limits, RewardSettings
from piexp.env.episode import EpisodeSettings
from piexp.harness.base import make_harness
from piexp.harness.pi.install import find_install, locked_versions
from piexp.policies.rollout import EpisodeRecord
from piexp.tasks import FAMILIES, build_tasks

PI_SETTINGS = default_settings("harness", HarnessSettings, "pi")
LANGUAGES = {
    "python": LanguageSettings(runtimes=["python", "python3"], filename="solution.py"),
    "javascript": LanguageSettings(runtimes=["node"], filename="solution.js"),
}
REWARD = default_settings("reward", RewardSettings)
MODEL = ("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507")

requires_pi = pytest.mark.skipif(
    find_install(locked_versions()["pi"]) is None,
    reason="Pi is not installed in piexp's cache here (make setup installs it)",
)


@pytest.fixture(scope="session")
def tasks():
    return build_tasks("train", 1, 0, list(FAMILIES)) + build_tasks("eval", 1, 0, list(FAMILIES))


def episode_settings(*, reward: RewardSettings = REWARD, **limits: Any) -> EpisodeSettings:
    base = default_settings("limits", Limits)
    return EpisodeSettings(
        model_name=MODEL[1],
        renderer_name=MODEL[0],
        languages=LANGUAGES,
        limits=base.model_copy(update=limits),
        reward=reward,
        sandbox_url="http://127.0.0.1:9/run_code",  # Pi's episodes run programs in Pi's own sandbox
    )


def pi_settings(**options: Any) -> HarnessSettings:
    return PI_SETTINGS.model_copy(update={"options": {**PI_SETTINGS.options, **options}})


def play_all(
    episodes: Sequence[Callable[[Any], Awaitable[EpisodeRecord]]], settings: HarnessSettings = PI_SETTINGS
) -> list[EpisodeRecord]:
    """Run each `episode(harness)` at once through one harness (one sandbox), then close it."""

    async def main() -> list[EpisodeRecord]:
        harness = make_harness(settings)
        try:
            return list(await asyncio.gather(*(episode(harness) for episode in episodes)))
        finally:
            await harness.aclose()

    return asyncio.run(main())
