"""Binary-gated group filtering (`algo.binary_gate`). A group whose
episodes all failed is dropped even though their shaped rewards differ (which the
cookbook's own shaped-total filter keeps); a group of mixed outcomes keeps its rewards;
the per-step counts come back from the group records (group_outcomes.jsonl), and from
binary_gate.jsonl in a run folder written before the decisions moved there, which a
resume trims like the records; the option is a preset away, turns the cookbook's filter
on, and is refused where it cannot work."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.data_processing import remove_constant_reward_groups
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, Trajectory, TrajectoryGroup, Transition

from piexp.config.compose import load
from piexp.env.binary_gate import GATE_FILE, binary_outcome, gate_steps
from piexp.env.dataset import episode_settings, group_builders
from piexp.env.group_outcomes import OUTCOMES_FILE, OutcomeLog
from piexp.env.group_wrappers import GroupWrapper
from piexp.env.splits import build_splits
from piexp.env.training_pipeline import training_chain
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


@dataclass(frozen=True)
class _Tagged(GroupWrapper):
    """TEST FIXTURE around a real workspace group: its final rewards as _FixtureGroup's,
    with a metric the gate must pass on."""

    async def compute_group_rewards(self, trajectory_group: list[Trajectory], env_group: Sequence[Env]):
        return [(0.0, {"fixture": 1.0}) for _ in trajectory_group]


class _Batches:
    """Batches of the given number of the run's real workspace groups, tagged."""

    def __init__(self, groups: int, config) -> None:
        tasks = build_splits(config).train
        self.groups = group_builders(tasks, ["python"], episode_settings(config, SANDBOX), 3, evaluation=False)
        self.size = groups

    def get_batch(self, step: int) -> list[EnvGroupBuilder]:
        return [_Tagged(inner=group) for group in self.groups[: self.size]]

    def __len__(self) -> int:
        return 3


SANDBOX = "http://127.0.0.1:1/run_code"  # never called: the fixture trajectories are graded as given


def _gated_chain(run_dir: Path, groups: int):
    """The training chain of a gated run recording into `run_dir`."""
    config = load(["mode=train", "algo.binary_gate=true", "family=arith", "tasks.train_per_family=2"])
    log = OutcomeLog(run_dir / OUTCOMES_FILE)
    sampling = _Batches(groups, config)
    return training_chain(config, sampling, SANDBOX, log, run_dir=run_dir, record_outcomes=True)  # type: ignore[arg-type]


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

    gated_dataset = _gated_chain(tmp_path, 2)
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
    # A group graded again at its place counts once (its last decision).
    _graded(gated_dataset.get_batch(8)[0], [_trajectory(1.0, True), _trajectory(0.0, False)])
    assert gate_steps(tmp_path)[1] == {"step": 8, "groups": 1, "dropped": 0, "informative_fraction": 1.0}
    # The decision is in the group's record, the one file: no binary_gate.jsonl.
    records = [json.loads(line) for line in (tmp_path / OUTCOMES_FILE).read_text().splitlines()]
    assert [(r["step"], r["group"], r["dropped"]) for r in records] == [
        (7, 0, True),
        (7, 1, False),
        (8, 0, True),
        (8, 0, False),
    ]
    assert records[0]["shaped_totals"] == pytest.approx([0.3, -0.1, 0.6]) and records[0]["outcomes"] == [0.0] * 3
    assert not (tmp_path / GATE_FILE).exists()


def test_a_run_folder_from_before_the_records_held_the_gate_reads_and_resumes(tmp_path: Path) -> None:
    """Its decisions are in binary_gate.jsonl, its group records have none: gate_steps
    reads the old file, a resume at step 1 trims it as it trims the records, and the
    decisions of the steps trained again go into the records."""
    old = [
        {"step": s, "group": 0, "outcomes": [0.0, 0.0, 0.0], "shaped_totals": [0.3, -0.1, 0.6], "dropped": True}
        for s in (0, 1)
    ]
    (tmp_path / GATE_FILE).write_text("".join(json.dumps(line) + "\n" for line in old))
    assert gate_steps(tmp_path) == [
        {"step": 0, "groups": 1, "dropped": 1, "informative_fraction": 0.0},
        {"step": 1, "groups": 1, "dropped": 1, "informative_fraction": 0.0},
    ]
    resumed = _gated_chain(tmp_path, 1)
    _graded(resumed.get_batch(1)[0], [_trajectory(1.0, True), _trajectory(0.0, False)])
    assert [json.loads(line)["step"] for line in (tmp_path / GATE_FILE).read_text().splitlines()] == [0]
    assert gate_steps(tmp_path) == [
        {"step": 0, "groups": 1, "dropped": 1, "informative_fraction": 0.0},
        {"step": 1, "groups": 1, "dropped": 0, "informative_fraction": 1.0},
    ]


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
