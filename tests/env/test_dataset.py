"""Group builders, the repeating dataset and the cookbook dataset builder."""

from __future__ import annotations

import asyncio
import pickle

import chz
import pytest

from piexp.config.argv import rewrite_list_overrides
from piexp.config.compose import load
from piexp.env.dataset import RepeatingDataset, WorkspaceDatasetBuilder, episode_settings, group_builders
from piexp.env.episode import WorkspaceGroupBuilder
from piexp.errors import UserError
from piexp.env.splits import build_splits

URL = "http://127.0.0.1:8080/run_code"


def small_config(*extra: str):
    return load(
        rewrite_list_overrides(
            [
                "family=arith,csv_agg",
                "lang=python,javascript",
                "tasks.train_per_family=3",
                "tasks.eval_per_family=2",
                "mode.groups_per_batch=4",
                "mode.max_steps=7",
                *extra,
            ]
        )
    )


def test_group_builders_follow_the_language_schedule() -> None:
    config = small_config()
    splits = build_splits(config)
    builders = group_builders(splits.train, config.train_languages, episode_settings(config, URL), 4, evaluation=False)
    assert len(builders) == len(splits.train) * 2
    assert [b.language for b in builders[:4]] == ["python", "javascript", "python", "javascript"]
    assert builders[0].logging_tags() == ["pi_workspace", "arith", "train", "python"]
    assert pickle.loads(pickle.dumps(builders[0])) == builders[0], "builders travel to workers"


def test_repeating_dataset_cycles_and_shifts() -> None:
    dataset = RepeatingDataset(list(range(5)), batch_size=2, n_batches=10)  # type: ignore[arg-type]
    assert len(dataset) == 10
    assert [dataset.get_batch(i) for i in range(4)] == [[0, 1], [2, 3], [4, 0], [1, 2]]
    dataset.set_epoch(3)
    assert dataset.get_batch(0) == [3, 4]
    assert RepeatingDataset([], 2, None).get_batch(0) == []
    assert len(RepeatingDataset(list(range(5)), 2, None)) == 3  # type: ignore[arg-type]
    assert len(RepeatingDataset(list(range(50)), 2, 4)) == 4, "max_steps caps a long dataset"  # type: ignore[arg-type]
    assert RepeatingDataset([1], 4, None).get_batch(0) == [1]  # type: ignore[list-item]


def test_dataset_builder_is_serialisable_and_builds_both_splits() -> None:
    config = small_config()
    builder = WorkspaceDatasetBuilder(config_json=config.model_dump_json(), sandbox_url=URL)
    assert chz.replace(builder) == builder
    train, evaluation = asyncio.run(builder())
    assert len(train) == 7
    batch = train.get_batch(0)
    assert len(batch) == 4 and all(isinstance(b, WorkspaceGroupBuilder) for b in batch)
    assert all(b.group_size == 4 and not b.evaluation for b in batch)
    assert evaluation is not None
    eval_groups = evaluation.get_batch(0)
    assert len(eval_groups) == 2 * 2 * 2  # families x tasks x languages
    assert all(b.group_size == 1 and b.evaluation for b in eval_groups)
    assert {b.task.split for b in eval_groups} == {"eval"}


def test_dataset_builder_refuses_a_non_loopback_sandbox() -> None:
    config = small_config()
    builder = WorkspaceDatasetBuilder(config_json=config.model_dump_json(), sandbox_url="http://10.1.2.3/run_code")
    with pytest.raises(UserError, match="loopback"):
        asyncio.run(builder())


def test_overlapping_splits_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import piexp.tasks as tasks_module

    original = tasks_module.build_tasks

    def same_stream(split, *args, **kwargs):  # eval draws the train stream: total overlap
        return [
            t.__class__(
                task_id=t.task_id.replace("train", split),
                family=t.family,
                split=split,
                instruction=t.instruction,
                files=t.files,
                answer=t.answer,
                params=t.params,
            )
            for t in original("train", *args, **kwargs)
        ]

    monkeypatch.setattr(tasks_module, "build_tasks", same_stream)
    with pytest.raises(UserError, match="overlap"):
        build_splits(small_config())
