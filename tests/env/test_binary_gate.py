"""Binary-gated group filtering (`algo.binary_gate`). A group whose
episodes all failed is dropped even though their shaped rewards differ (which the
cookbook's own shaped-total filter keeps); a group of mixed outcomes keeps its rewards;
the per-step counts come back from binary_gate.jsonl; the option is a preset away, turns
the cookbook's filter on, and is refused where it cannot work."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.data_processing import remove_constant_reward_groups
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, Trajectory, TrajectoryGroup, Transition

from piexp.config.compose import load
from piexp.env.binary_gate import GATE_FILE, BinaryGateDataset, binary_outcome, gate_steps
from piexp.errors import UserError
from piexp.launch.train import cookbook_config


def _trajectory(shaped: float, correct: bool) -> Trajectory:
    """A two-turn episode as the env reports it: the reward and its metrics on the last step."""
    ob = tinker.ModelInput.from_ints([1, 2, 3])
    action = TokensWithLogprobs(tokens=[4, 5], maybe_logprobs=[0.0, 0.0])
    return Trajectory(
        transitions=[
            Transition(ob=ob, ac=action, reward=0.0, episode_done=False),
            Transition(
                ob=ob,
                ac=action,
                reward=shaped,
                episode_done=True,
                metrics={"functional_correct": float(correct), "tool_called": 1.0},
            ),
        ],
        final_ob=ob,
    )


class _FixtureGroup(EnvGroupBuilder):
    """TEST FIXTURE standing in for piexp's workspace group: like it (and the cookbook's
    tool envs), all reward comes from the env's steps, so the group reward is 0."""

    async def make_envs(self) -> Sequence[Env]:
        return []

    async def compute_group_rewards(self, trajectory_group: list[Trajectory], env_group: Sequence[Env]):
        return [(0.0, {"fixture": 1.0}) for _ in trajectory_group]


class _FixtureDataset:
    """TEST FIXTURE: a batch of the given number of fixture groups."""

    def __init__(self, groups: int) -> None:
        self.groups = groups

    def get_batch(self, index: int) -> list[EnvGroupBuilder]:
        return [_FixtureGroup() for _ in range(self.groups)]

    def __len__(self) -> int:
        return 3


def _graded(builder: EnvGroupBuilder, trajectories: list[Trajectory]) -> TrajectoryGroup:
    rewards: list[tuple[float, Metrics]] = asyncio.run(builder.compute_group_rewards(trajectories, []))
    return TrajectoryGroup(trajectories, [reward for reward, _ in rewards], [metrics for _, metrics in rewards])


def test_a_group_that_all_failed_with_varied_shaped_rewards_is_dropped(tmp_path: Path) -> None:
    failed = [_trajectory(0.3, False), _trajectory(-0.1, False), _trajectory(0.6, False)]
    mixed = [_trajectory(1.0, True), _trajectory(0.3, False), _trajectory(0.3, False)]
    assert [binary_outcome(t) for t in mixed] == [1.0, 0.0, 0.0]

    # Without the gate the cookbook's filter keeps the failed group: its shaped totals differ.
    plain = [_graded(_FixtureGroup(), failed), _graded(_FixtureGroup(), mixed)]
    assert remove_constant_reward_groups(plain) == plain

    gated_dataset = BinaryGateDataset(_FixtureDataset(2), str(tmp_path / GATE_FILE))  # type: ignore[arg-type]
    builders = gated_dataset.get_batch(7)
    gated = [_graded(builders[0], failed), _graded(builders[1], mixed)]
    assert gated[0].get_total_rewards() == [0.0, 0.0, 0.0]  # exactly equal: the cookbook drops it
    assert [m["binary_gate/own_total"] for m in gated[0].metrics_G] == pytest.approx([0.3, -0.1, 0.6])
    assert gated[1].get_total_rewards() == pytest.approx([1.0, 0.3, 0.3])  # mixed outcomes: untouched
    assert all(m["fixture"] == 1.0 for m in gated[1].metrics_G)
    assert remove_constant_reward_groups(gated) == [gated[1]]

    # All succeeded (shaped totals equal or not): dropped too.
    solved = _graded(gated_dataset.get_batch(8)[0], [_trajectory(1.0, True), _trajectory(1.0, True)])
    assert [m["binary_gate/dropped"] for m in solved.metrics_G] == [1.0, 1.0]
    assert gate_steps(tmp_path) == [
        {"step": 7, "groups": 2, "dropped": 1, "informative_fraction": 0.5},
        {"step": 8, "groups": 1, "dropped": 1, "informative_fraction": 0.0},
    ]
    # A step replayed after a resume counts once (its last decision).
    _graded(gated_dataset.get_batch(8)[0], [_trajectory(1.0, True), _trajectory(0.0, False)])
    assert gate_steps(tmp_path)[1] == {"step": 8, "groups": 1, "dropped": 0, "informative_fraction": 1.0}


def test_the_gate_is_a_preset_away_and_turns_the_cookbook_filter_on(tmp_path: Path) -> None:
    assert load(["mode=train"]).algo.binary_gate is False  # off by default
    config = load(["experiment=binary_gate"])
    assert config.algo.binary_gate and config.algo.recipe == "dapo"
    on = load(["mode=train", "algo.binary_gate=true"])
    assert not on.algo.remove_constant_reward_groups
    assert cookbook_config(on, tmp_path, "http://127.0.0.1:1/run_code", None).remove_constant_reward_groups


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["mode=train", "algo.binary_gate=true", "mode.group_size=1"], "group_size"),
        (["mode=eval", "policy=oracle", "algo.binary_gate=true"], "training option"),
    ],
)
def test_the_gate_is_refused_where_it_cannot_work(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        load(overrides)
