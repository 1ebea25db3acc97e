"""mode=check: passes on a healthy run, and fails naming the cell and task when a
reference is broken, a stored answer is wrong, or a requested runtime is missing."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

import piexp.tasks
from piexp.config.compose import load
from piexp.launch.check import CheckFailedError, run_check
from piexp.env.splits import RunSplits, build_splits

BASE = [
    "mode=check",
    "family=[arith,csv_agg]",
    "lang=[python,javascript]",
    "tasks.train_per_family=2",
    "tasks.eval_per_family=2",
    "mode.oracle_tasks_per_cell=1",
]


def config_and_splits(*extra: str):
    config = load([*BASE, *extra])
    return config, build_splits(config)


def test_check_passes_and_writes_check_json(sandbox_url, tmp_path):
    config, splits = config_and_splits()
    assert run_check(config, tmp_path, sandbox_url, splits) == 1.0
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["passed"] and report["violations"] == []
    assert report["runtimes"]["python"]["status"] == "ok"
    assert report["runtimes"]["javascript"]["status"] == "ok"
    assert report["runtimes"]["julia"]["requested"] is False
    for family in ("arith", "csv_agg"):
        for language in ("python", "javascript"):
            cell = report["cells"][family][language]
            assert cell["status"] == "ok"
            assert cell["policies"]["oracle"] == {"ok": 2, "total": 2}  # 1 per split
            assert set(cell["policies"]) == {"oracle", "guess", "crash", "wrong", "edit"}
    policies = {episode["policy"] for episode in report["episodes"]}
    assert policies == {"oracle", "guess", "crash", "wrong", "edit"}


def test_broken_reference_fails_and_names_the_cell(sandbox_url, tmp_path, monkeypatch):
    real = piexp.tasks.reference_solution

    def broken(family: str, language: str) -> str:
        if (family, language) == ("csv_agg", "javascript"):
            return 'console.log("42");\n'  # runs fine, prints the wrong number
        return real(family, language)

    monkeypatch.setattr(piexp.tasks, "reference_solution", broken)
    config, splits = config_and_splits()
    with pytest.raises(CheckFailedError) as caught:
        run_check(config, tmp_path, sandbox_url, splits)
    message = str(caught.value)
    assert "cell csv_agg x javascript: oracle on task" in message
    first = next(t for t in splits.train if t.family == "csv_agg")
    assert first.task_id in message
    assert "arith x" not in message and "csv_agg x python" not in message
    assert caught.value.exit_code == 1
    report = json.loads((tmp_path / "check.json").read_text())
    assert not report["passed"]
    assert report["cells"]["csv_agg"]["javascript"]["status"] == "fail"
    assert report["cells"]["csv_agg"]["python"]["status"] == "ok"


def test_wrong_stored_answer_fails_and_names_the_task(sandbox_url, tmp_path):
    config, splits = config_and_splits()
    target = next(t for t in splits.eval if t.family == "arith")
    bad = dataclasses.replace(target, answer=str(int(target.answer) + 1))
    eval_tasks = [bad if t.task_id == target.task_id else t for t in splits.eval]
    splits = RunSplits(train=splits.train, eval=eval_tasks, overlap_report=splits.overlap_report)
    with pytest.raises(CheckFailedError) as caught:
        run_check(config, tmp_path, sandbox_url, splits)
    message = str(caught.value)
    assert f"cell arith x python: oracle on task {target.task_id}" in message
    assert f"cell arith x javascript: oracle on task {target.task_id}" in message


@pytest.mark.skipif(shutil.which("julia") is not None, reason="julia is installed, so it is not missing")
def test_missing_runtime_fails_only_when_requested(sandbox_url, tmp_path):
    config, splits = config_and_splits("eval_lang=[python,julia]")
    with pytest.raises(CheckFailedError) as caught:
        run_check(config, tmp_path, sandbox_url, splits)
    assert "runtime julia is missing" in str(caught.value)
    report = json.loads((tmp_path / "check.json").read_text())
    assert report["runtimes"]["julia"] == {
        "status": "missing",
        "detail": report["runtimes"]["julia"]["detail"],
        "requested": True,
    }
    # Reported as a missing runtime, not as failing tasks.
    assert report["cells"]["arith"]["julia"] == {"status": "runtime missing"}
    assert not any(e["language"] == "julia" for e in report["episodes"])
    assert all("julia" in v for v in report["violations"])
