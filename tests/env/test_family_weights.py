"""`tasks.family_weights` mixes families in every training batch by
weight (a stateless schedule: a batch depends only on its index), instead of the groups'
task order; bad weights are refused."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from piexp.config.compose import load
from piexp.env.dataset import WeightedFamilyDataset, WorkspaceDatasetBuilder, episode_settings, group_builders
from piexp.env.splits import build_splits
from piexp.errors import UserError


def _train_groups(families: str, per_family: int):
    config = load(["mode=train", f"family=[{families}]", f"tasks.train_per_family={per_family}"])
    splits = build_splits(config)
    return group_builders(
        splits.train, ["python"], episode_settings(config, "http://127.0.0.1:1/run_code"), 2, evaluation=False
    )


def test_batches_mix_families_by_weight_and_depend_only_on_their_index() -> None:
    groups = _train_groups("arith,dates,csv_agg", 4)
    dataset = WeightedFamilyDataset(groups, {"arith": 2.0, "dates": 1.0}, batch_size=8, n_batches=6)  # csv_agg: 1
    assert len(dataset) == 6
    batches = [dataset.get_batch(i) for i in range(6)]
    for batch in batches:
        counts = Counter(builder.task.family for builder in batch)
        assert counts["arith"] == 4 and counts["dates"] == 2 and counts["csv_agg"] == 2  # 2:1:1 in every batch of 8
    # Each family cycles through its own groups (4 tasks): arith's 24 slots visit each 6 times.
    arith = Counter(b.task.task_id for batch in batches for b in batch if b.task.family == "arith")
    assert set(arith.values()) == {6} and len(arith) == 4
    # A fresh dataset (a resumed run) asked for batch 5 first gives the same batch.
    fresh = WeightedFamilyDataset(groups, {"arith": 2.0, "dates": 1.0}, batch_size=8, n_batches=6)
    assert [b.task.task_id for b in fresh.get_batch(5)] == [b.task.task_id for b in batches[5]]


def test_weights_are_checked_and_training_only() -> None:
    config = load(["mode=train", "family=[arith,dates]", "tasks.family_weights={arith: 3}"])
    assert config.tasks.family_weights == {"arith": 3.0}
    # The training run's dataset builder uses it.
    builder = WorkspaceDatasetBuilder(config_json=config.model_dump_json(), sandbox_url="http://127.0.0.1:1/run_code")
    train, _ = asyncio.run(builder())
    batch = train.get_batch(0)
    assert Counter(b.task.family for b in batch) == {"arith": 3 * len(batch) // 4, "dates": len(batch) // 4}
    assert load(["mode=train"]).tasks.family_weights is None  # off by default
    for overrides, message in (
        (["mode=train", "family=[arith]", "tasks.family_weights={dates: 1}"], "not among the selected families"),
        (["mode=train", "family=[arith]", "tasks.family_weights={arith: 0}"], "greater than 0"),
        (["mode=eval", "policy=oracle", "tasks.family_weights={arith: 1}"], "training option"),
    ):
        with pytest.raises(UserError, match=message):
            load(overrides)
