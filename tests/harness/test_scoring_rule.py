"""One scoring rule in both harnesses: the same model turns, played in the reference
environment and in the real Pi, end with the same stop reason and the same reward (a
malformed tool call, with and without `algo.parse_errors`; a stop at `limits.max_turns`;
a solved task as the control that the fixture's turns are sound). docs/harness.md has the
table these cases pin.

A labelled fixture stands in for the model (`TurnsFixture`): each call emits its next
scripted text as tokens; the sandbox, Pi, the renderer and the cookbook's rollout are real."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import chz
import pytest
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.rollout_limits import ParseErrorPolicy
from tinker_cookbook.rl.rollout_presets import default_rollout_config_for_model

from piexp.config.defaults import default_settings
from piexp.config.schema import HarnessSettings
from piexp.env.episode import get_run_renderer
from piexp.harness.base import make_harness
from piexp.tasks import task_reference
from tests.harness.conftest import MODEL, PI_SETTINGS, episode_settings, requires_pi

pytestmark = requires_pi

BUILTIN = default_settings("harness", HarnessSettings)
MALFORMED = '<tool_call>\n{"name": "write", "arguments": {path: solution.py}}\n</tool_call>'


class TurnsFixture(TokenCompleter):
    """Test fixture standing in for a model: its n-th call emits the n-th text (the last
    one again past the end), then the end-of-turn token."""

    def __init__(self, texts: list[str], cut_at: int | None = None) -> None:
        self.texts = texts
        self.cut_at = cut_at  # the sampler's budget (the reference environment's caller passes none)
        self.renderer = get_run_renderer(*MODEL)
        self.n = 0

    async def __call__(self, model_input: Any, stop: Any, **_: Any) -> TokensWithLogprobs:
        text = self.texts[min(self.n, len(self.texts) - 1)]
        self.n += 1
        tokens = self.renderer.tokenizer.encode(text, add_special_tokens=False) + [stop[0]]
        max_tokens = self.cut_at
        if max_tokens is not None and len(tokens) > max_tokens:
            # What a sampler does at its budget: the turn cut, stop reason "length".
            return TokensWithLogprobs(tokens=tokens[:max_tokens], maybe_logprobs=[-0.5] * max_tokens,
                                      stop_reason="length")  # fmt: skip
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[-0.5] * len(tokens))


def _call(name: str, **arguments: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _solve(task: Any) -> list[str]:
    return [
        _call("write", path="solution.py", content=task_reference(task, "python")),
        _call("bash", command="python solution.py"),
        f"The answer is {task.answer}.",
    ]


def _play_both(
    texts: list[str], task: Any, url: str, parse_errors: ParseErrorPolicy | None = None, cut_at: int | None = None,
    **limits: Any,
):  # fmt: skip
    rollout = default_rollout_config_for_model(MODEL[1])
    rollout = chz.replace(rollout, parse_errors=parse_errors)
    settings = episode_settings(**limits)
    settings = type(settings)(**{**settings.__dict__, "rollout": rollout, "sandbox_url": url})

    async def play(harness_settings: HarnessSettings):
        harness = make_harness(harness_settings)
        try:
            return await harness.play(TurnsFixture(texts, cut_at), "model", task, "python", settings)
        finally:
            await harness.aclose()

    return [asyncio.run(play(s)) for s in (BUILTIN, PI_SETTINGS)]


def _same(builtin, pi):
    assert not builtin.infrastructure_failure and not pi.infrastructure_failure, (builtin.error, pi.error)
    assert (builtin.stop_reason, builtin.reward, builtin.shaped) == (pi.stop_reason, pytest.approx(pi.reward),
                                                                      pytest.approx(pi.shaped))  # fmt: skip
    return builtin


def test_a_solved_task_scores_the_same_in_both_harnesses(tasks, sandbox_url):
    record = _same(*_play_both(_solve(tasks[0]), tasks[0], sandbox_url))
    assert record.reward == 1.0


def test_a_malformed_tool_call_ends_the_episode_with_the_same_penalty_in_both(tasks, sandbox_url):
    """No policy configured: the cookbook's one-shot rule, stop reason parse_error, -0.1."""
    record = _same(*_play_both([MALFORMED], tasks[0], sandbox_url))
    assert record.stop_reason == "parse_error" and record.reward == pytest.approx(-0.1)


def test_a_retried_malformed_tool_call_costs_its_penalty_in_both(tasks, sandbox_url):
    """Under `algo.parse_errors` the model is told and samples again: a malformed turn,
    then the solution, passes less the penalty in both harnesses."""
    policy = ParseErrorPolicy(max_consecutive=1, penalty_per_error=0.05, terminal_reward=-0.3)
    record = _same(*_play_both([MALFORMED, *_solve(tasks[0])], tasks[0], sandbox_url, policy))
    assert record.reward == pytest.approx(0.95)


def test_malformed_tool_calls_past_the_budget_end_with_the_terminal_reward_in_both(tasks, sandbox_url):
    policy = ParseErrorPolicy(max_consecutive=1, penalty_per_error=0.05, terminal_reward=-0.3)
    record = _same(*_play_both([MALFORMED, MALFORMED], tasks[0], sandbox_url, policy))
    assert record.stop_reason == "parse_error" and record.reward == pytest.approx(-0.35)


def test_a_stop_at_the_turn_limit_scores_the_same_in_both(tasks, sandbox_url):
    texts = [*_solve(tasks[0])[:2], _call("bash", command="python solution.py")]
    record = _same(*_play_both(texts, tasks[0], sandbox_url, max_turns=3))
    assert record.stop_reason == "max_turns"


def test_a_turn_cut_at_the_generation_limit_ends_the_same_in_both(tasks, sandbox_url):
    """A turn longer than `limits.max_generation_tokens` (a tool call never closed)."""
    long_write = _call("write", path="solution.py", content="print(1)\n" * 200)
    record = _same(*_play_both([long_write, *_solve(tasks[0])], tasks[0], sandbox_url, cut_at=64))
    assert record.stop_reason == "max_tokens" and record.reward == pytest.approx(-0.1)


def test_a_prompt_past_the_trajectory_limit_ends_the_same_in_both(tasks, sandbox_url):
    """A prompt longer than `limits.max_trajectory_tokens`: not sampled, the episode ends."""
    record = _same(*_play_both(_solve(tasks[0]), tasks[0], sandbox_url, max_trajectory_tokens=64))
    assert record.stop_reason == "max_tokens" and record.reward == pytest.approx(-0.1)


def test_a_later_prompt_past_the_trajectory_limit_ends_the_same_in_both(tasks, sandbox_url):
    """The first prompt fits (Pi's, with its system prompt, about 2,000 tokens; the
    reference environment's fewer), the next one, holding a 1,000-line program, does not
    in either: stop reason context_overflow, nothing graded."""
    big = _call("write", path="solution.py", content="print(1)\n" * 1000)
    record = _same(*_play_both([big], tasks[0], sandbox_url, max_trajectory_tokens=7500, max_generation_tokens=4200))
    assert record.stop_reason == "context_overflow" and record.reward == pytest.approx(-0.1)


def _train_both(texts: list[str], task: Any, url: str, cut_at: int | None = None):
    """One training episode in each harness through the cookbook's own rollout: (total
    reward, the last step's metrics) each."""
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from piexp.env.episode import WorkspaceGroupBuilder

    settings = episode_settings()
    settings = type(settings)(**{**settings.__dict__, "rollout": default_rollout_config_for_model(MODEL[1]),
                                 "sandbox_url": url})  # fmt: skip

    async def train(harness_settings: HarnessSettings):
        harness = make_harness(harness_settings)
        try:
            builder = WorkspaceGroupBuilder(task=task, language="python", settings=settings, group_size=1,
                                            episode_env=harness.training_env)  # fmt: skip
            group = await do_group_rollout(builder, TurnsFixture(texts, cut_at))
            return float(group.get_total_rewards()[0]), dict(group.trajectories_G[0].transitions[-1].metrics)
        finally:
            await harness.aclose()

    return [asyncio.run(train(s)) for s in (BUILTIN, PI_SETTINGS)]


def test_training_ends_a_cut_turn_and_a_malformed_one_the_same_in_both(tasks, sandbox_url):
    """In training too (each harness's `training_env` stepped by the cookbook's rollout):
    a turn cut at the sampler's budget, and a malformed tool call, each end the episode
    with the same reward and the same flag in both harnesses."""
    long_write = _call("write", path="solution.py", content="print(1)\n" * 200)
    (builtin, builtin_metrics), (pi, pi_metrics) = _train_both([long_write], tasks[0], sandbox_url, cut_at=64)
    assert builtin == pytest.approx(pi) == pytest.approx(-0.1)
    assert builtin_metrics["max_tokens_reached"] == pi_metrics["max_tokens_reached"] == 1.0
    (builtin, builtin_metrics), (pi, pi_metrics) = _train_both([MALFORMED], tasks[0], sandbox_url)
    assert builtin == pytest.approx(pi) == pytest.approx(-0.1)
    assert builtin_metrics["parse_error"] == pi_metrics["parse_error"] == 1.0
