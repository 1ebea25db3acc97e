"""`algo.shuffle_rewards`: the train dataset piexp builds for the cookbook hands out
groups whose total rewards, hence the advantages the cookbook's own
`compute_advantages` derives, are a reproducible permutation of the true ones; off, they
are the true ones. Real cookbook types, real workspace environments; no service."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.data_processing import compute_advantages
from tinker_cookbook.rl.metric_util import compute_trajectory_metrics
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition

from piexp.config.compose import load
from piexp.env.shuffled_rewards import ShuffledRewards
from piexp.env.training_pipeline import TrainingGroup
from piexp.launch.train import cookbook_config

SANDBOX = "http://127.0.0.1:8080/run_code"
# Distinct totals, each split over two steps (the step rewards, as the workspace env gives them).
TOTALS = [0.0, 0.25, 0.6, 1.0]


def _batch(tmp_path: Path, *overrides: str) -> list[Any]:
    config = load(["mode.group_size=4", "mode.groups_per_batch=4", *overrides])
    train, _ = asyncio.run(cookbook_config(config, tmp_path, SANDBOX).dataset_builder())
    # the training chain's groups without the stages that record (the run's episodes, its groups' outcomes)
    return [
        dataclasses.replace(builder, stages=tuple(s for s in builder.stages if isinstance(s, ShuffledRewards)))
        for builder in train.get_batch(0)
    ]


def _trajectory(total: float) -> Trajectory:
    step = Transition(ob=tinker.ModelInput.from_ints([1]), ac=TokensWithLogprobs(tokens=[2], maybe_logprobs=[0.0]),
                      reward=total / 2, episode_done=False)  # fmt: skip
    last = Transition(ob=tinker.ModelInput.from_ints([3]), ac=TokensWithLogprobs(tokens=[4], maybe_logprobs=[0.0]),
                      reward=total / 2, episode_done=True)  # fmt: skip
    return Trajectory(transitions=[step, last], final_ob=tinker.ModelInput.from_ints([5]))


def _group(builder: Any) -> TrajectoryGroup:
    envs = asyncio.run(builder.make_envs())
    trajectories = [_trajectory(total) for total in TOTALS]
    rewards_and_metrics = asyncio.run(builder.compute_group_rewards(trajectories, envs))
    return TrajectoryGroup(trajectories, [r for r, _ in rewards_and_metrics], [m for _, m in rewards_and_metrics])


def _advantages(builder: Any) -> list[float]:
    # Rounded: torch holds the advantages as float32.
    return [round(float(value), 6) for value in compute_advantages([_group(builder)])[0]]


def test_shuffled_advantages_are_a_reproducible_permutation_of_the_true_ones(tmp_path: Path) -> None:
    plain, shuffled = _batch(tmp_path), _batch(tmp_path, "algo.shuffle_rewards=true")
    assert all(isinstance(builder, TrainingGroup) and builder.stages for builder in shuffled)
    assert not any(builder.stages for builder in plain)
    assert len(asyncio.run(shuffled[0].make_envs())) == 4  # the real workspace group underneath
    true_advantages = [round(total - sum(TOTALS) / 4, 6) for total in TOTALS]
    moved = 0
    for plain_builder, shuffled_builder in zip(plain, shuffled, strict=True):
        assert _advantages(plain_builder) == true_advantages  # off: the cookbook's advantages, unchanged
        advantages = _advantages(shuffled_builder)
        assert sorted(advantages) == sorted(true_advantages)
        moved += advantages != true_advantages
        assert advantages == _advantages(shuffled_builder)  # seeded: the same shuffle every time
    assert moved, "no group of the batch was shuffled"
    # The cookbook's logged mean reward is the true one; each episode's own total is kept.
    group = _group(shuffled[0])
    metrics = compute_trajectory_metrics([group], [shuffled[0].logging_tags()])
    assert abs(metrics["env/all/reward/total"] - sum(TOTALS) / 4) < 1e-9
    assert [m["shuffle_rewards/own_total"] for m in group.metrics_G] == TOTALS


def test_groups_of_other_batches_shuffle_differently(tmp_path: Path) -> None:
    config = load(["mode.group_size=4", "mode.groups_per_batch=4", "algo.shuffle_rewards=true"])
    train, _ = asyncio.run(cookbook_config(config, tmp_path, SANDBOX).dataset_builder())
    seeds = {
        stage.seed(builder.step, builder.group)
        for index in range(3)
        for builder in train.get_batch(index)
        for stage in builder.stages
        if isinstance(stage, ShuffledRewards)
    }
    assert len(seeds) == 12
