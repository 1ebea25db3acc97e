"""Every episode reports `passed` once, on its last transition: 1 when it was graded with
all four steps holding, 0 otherwise, an episode that ended ungraded included. The cookbook
averages a metric over the transitions that report it, so its mean of `functional_correct`
leaves the ungraded episodes out (a training run's eval with 1 graded success and 3 turns
cut at max_tokens read 1.0); the mean of `passed` is the pass rate (0.25 there). Real
workspace envs, sandbox and the cookbook's group rollout; the cut turns come from a
labelled test fixture standing in for a model."""

from __future__ import annotations

import asyncio

from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.rollouts import do_group_rollout
from tinker_cookbook.utils.misc_utils import dict_mean

from piexp.config.compose import load
from piexp.env.dataset import episode_settings
from piexp.env.episode import WorkspaceGroupBuilder, get_run_renderer
from piexp.env.reward import PASSED_METRIC
from piexp.env.splits import build_splits
from piexp.policies import make_policy
from piexp.sandbox.client import close_sandbox_clients


class CutAfterTheFirstCall(TokenCompleter):
    """Test fixture standing in for a model: the oracle's turns, except that the first turn
    of every episode after the first `passing` is cut at the token limit (stop reason
    "length"). A first turn is one whose prompt is the task's prompt (the shortest seen)."""

    def __init__(self, inner: TokenCompleter, passing: int) -> None:
        self.inner, self.passing, self.episodes = inner, passing, 0
        self.prompt_length: int | None = None

    async def __call__(self, model_input, stop, *, max_tokens=None):
        sampled = await self.inner(model_input, stop, max_tokens=max_tokens)
        self.prompt_length = self.prompt_length or model_input.length
        if model_input.length == self.prompt_length:
            self.episodes += 1
            if self.episodes > self.passing:
                return TokensWithLogprobs(tokens=sampled.tokens[:4], maybe_logprobs=[0.0] * 4, stop_reason="length")
        return sampled


def test_passed_counts_every_episode_and_the_mean_of_functional_correct_does_not(sandbox_url):
    config = load(["mode=train", "family=arith", "lang=python", "tasks.train_per_family=1"])
    splits = build_splits(config)
    settings = episode_settings(config, sandbox_url)
    renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
    oracle = make_policy("oracle", renderer, list(splits.train))
    builder = WorkspaceGroupBuilder(task=splits.train[0], language="python", settings=settings, group_size=4)

    async def play():
        try:
            return await do_group_rollout(builder, CutAfterTheFirstCall(oracle, passing=1))
        finally:
            await close_sandbox_clients()

    group = asyncio.run(play())
    last = [trajectory.transitions[-1].metrics for trajectory in group.trajectories_G]
    assert sorted(metrics[PASSED_METRIC] for metrics in last) == [0.0, 0.0, 0.0, 1.0]
    assert sum("functional_correct" in metrics for metrics in last) == 1, "three episodes ended ungraded"
    every_transition = [t.metrics for trajectory in group.trajectories_G for t in trajectory.transitions]
    means = dict_mean(every_transition)
    assert means["functional_correct"] == 1.0 and means[PASSED_METRIC] == 0.25
