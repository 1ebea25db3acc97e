"""A piexp-built base model whose episodes are played in both harnesses
(`model=learner-local-pi`): task i's episode in `harnesses[i % n]`, in task order, Pi's
through the real Pi (its system prompt, its tools, its plain-text results), and its cache
key apart from learner-local's, which keeps the key it had before recipes could name
harnesses."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from piexp.pretrain import build
from piexp.pretrain.recipe import LearnerRecipe
from tests.harness.conftest import requires_pi

TINY_PI = dataclasses.replace(
    build.LEARNER_RECIPES["learner-local-pi"],
    tasks_per_family=4,
    copy_tasks_per_family=3,
    steps=2,
    whole_turns_from_step=1,
    batch_sequences=2,
    sampled_negatives=64,
    exact_positions=4,
)


def test_learner_local_keeps_its_recipe_and_the_pi_build_is_another_model() -> None:
    """learner-local's recipe is written without the harness field (so its builds keep
    their content keys); the two-harness recipe names Pi, is cached apart, and its inputs
    digest reads the harness package (Pi's own code shapes its episodes' tokens)."""
    reference, both = build.LEARNER_RECIPES["learner-local"], build.LEARNER_RECIPES["learner-local-pi"]
    assert "harnesses" not in reference.to_json() and tuple(both.to_json()["harnesses"]) == ("builtin", "pi")
    assert build.learner_name(reference) == "learner-local" and build.learner_name(both) == "learner-local-pi"
    assert build._models_root(both).name == "learner-local-pi" != build._models_root(reference).name
    assert "harness" in both.source_packages and "harness" not in reference.source_packages
    assert dataclasses.replace(LearnerRecipe(), harnesses=("builtin",)).to_json() == reference.to_json()


def test_episodes_of_a_harness_without_a_rollout_are_refused() -> None:
    from piexp.pretrain.data import harness_trajectories

    config = build.data_config(TINY_PI)
    with pytest.raises(ValueError, match="harness pi need a rollout"):
        asyncio.run(harness_trajectories(config, "http://127.0.0.1:9/run_code", [object()] * 2, ["oracle"] * 2,  # type: ignore[list-item]
                                         ("builtin", "pi"), {}))  # fmt: skip


@requires_pi
def test_a_two_harness_build_plays_every_other_episode_in_pi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small build of the two-harness recipe (14 episodes, 7 through Pi; two fit steps):
    its episodes alternate between the reference environment's prompt and Pi's, each
    oracle episode solves its task in either, and the model is written with its marker.
    About a minute on 2 cores."""
    from piexp.launch.base_model import learner_rollouts
    from piexp.launch.sandbox import run_sandbox
    from piexp.pretrain import data

    monkeypatch.setattr(build, "_models_root", lambda recipe: tmp_path / "models" / build.learner_name(recipe))
    monkeypatch.setattr(build, "HELDOUT_TASKS", 2)
    monkeypatch.setattr(build, "HELDOUT_ANSWERS", 2)
    played: list[tuple[list, list]] = []
    original = data.harness_trajectories

    async def recorded(*args, **kwargs):
        result = await original(*args, **kwargs)
        played.append(result)
        return result

    monkeypatch.setattr(data, "harness_trajectories", recorded)
    sandbox = build.data_config(TINY_PI).sandbox
    path = build.ensure_learner_model(lambda: run_sandbox(sandbox), TINY_PI, learner_rollouts(TINY_PI))
    marker = json.loads((path / build.MARKER).read_text())
    assert path.parent.name == "learner-local-pi" and marker["model"] == "learner-local-pi"
    assert marker["episodes"] == 14 and marker["mean_reward_by_policy"].get("oracle", 1.0) == 1.0
    ((trajectories, rewards),) = played
    from piexp.pretrain.build import register_learner_tokenizer
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    register_learner_tokenizer(TINY_PI)
    tokenizer = get_tokenizer("learner-local-pi")
    prompts = [tokenizer.decode(t.transitions[0].ob.to_ints()) for t in trajectories]
    in_pi = ["pi-coding-agent" in prompt for prompt in prompts]
    assert in_pi == [index % 2 == 1 for index in range(14)], in_pi
    assert all(len(t.transitions) >= 2 for t in trajectories)  # every episode called a tool
