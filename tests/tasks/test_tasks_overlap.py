"""Train and eval never overlap, and a constructed overlap is refused naming the tasks."""

from __future__ import annotations

import json

import pytest

from piexp.errors import UserError
from piexp.tasks import (
    FAMILIES,
    Task,
    assert_no_overlap,
    build_splits,
    build_tasks,
    check_split_overlap,
)


def test_no_overlap_across_100_seeds() -> None:
    """All train tasks of seeds 0..99 against all eval tasks of seeds 0..99 (also across
    seeds: a run with seed 3 must not evaluate on what a run with seed 7 trained on)."""
    families = list(FAMILIES)
    train, evals = [], []
    for seed in range(100):
        train += build_tasks("train", 2, seed, families)
        evals += build_tasks("eval", 1, seed, families)
    report = check_split_overlap(train, evals)
    assert report.ok, report.describe()
    assert len({t.task_digest for t in train + evals}) == len(train) + len(evals)


def test_build_splits_returns_a_clean_json_report() -> None:
    train, evals, report = build_splits(2, 1, 0, ["arith", "grid_search"])
    assert len(train) == 4 and len(evals) == 2
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True
    assert data["counts"] == {
        "train": 4,
        "eval": 2,
        "digest_overlaps": 0,
        "files_overlaps": 0,
        "params_overlaps": 0,
    }


def _clone(task: Task, task_id: str, **changes) -> Task:
    fields = dict(
        task_id=task_id,
        family=task.family,
        split="eval",
        instruction=task.instruction,
        files=dict(task.files),
        answer=task.answer,
        params=dict(task.params),
    )
    fields.update(changes)
    return Task(**fields)


@pytest.fixture()
def splits():
    return build_tasks("train", 2, 0, ["arith"]), build_tasks("eval", 2, 0, ["arith"])


def test_refuses_same_digest(splits) -> None:
    train, evals = splits
    copy = _clone(train[1], "eval-copied-digest", params={"other": 1})
    report = check_split_overlap(train, [*evals, copy])
    assert [e["eval_task_id"] for e in report.digest_overlaps] == ["eval-copied-digest"]
    with pytest.raises(UserError) as info:
        assert_no_overlap(train, [*evals, copy])
    assert "eval-copied-digest" in str(info.value) and train[1].task_id in str(info.value)
    assert "same digest" in str(info.value)


def test_refuses_same_input_files(splits) -> None:
    train, evals = splits
    copy = _clone(train[0], "eval-same-files", instruction="Another question.", answer="1", params={"other": 2})
    report = check_split_overlap(train, [*evals, copy])
    assert not report.digest_overlaps and not report.params_overlaps
    assert report.files_overlaps[0]["train_task_id"] == train[0].task_id
    with pytest.raises(UserError, match="eval-same-files"):
        report.raise_if_overlap()


def test_refuses_same_family_params(splits) -> None:
    train, evals = splits
    copy = _clone(evals[0], "eval-same-params", params=dict(train[0].params))
    report = check_split_overlap(train, [*evals, copy])
    assert not report.digest_overlaps and not report.files_overlaps
    assert report.params_overlaps == [
        {"train_task_id": train[0].task_id, "eval_task_id": "eval-same-params", "key": train[0].params_key}
    ]
    with pytest.raises(UserError, match=train[0].task_id):
        report.raise_if_overlap()


def test_same_params_in_another_family_is_not_an_overlap(splits) -> None:
    train, _ = splits
    other = _clone(build_tasks("eval", 1, 0, ["dates"])[0], "eval-other", params=dict(train[0].params))
    assert check_split_overlap(train, [other]).ok
