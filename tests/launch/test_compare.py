"""`python -m piexp compare` on real offline eval runs (oracle vs wrong answers, arith
and dates, Python): the table, JSON and plot are written, the oracle's advantage is
reported with an interval that excludes 0, identical runs differ by exactly 0, and runs
on different tasks (another seed) are refused naming a task, before anything is written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.job_launcher import run_piexp


def _eval(run_dir: Path, policy: str, *extra: str) -> Path:
    result = run_piexp(
        "mode=eval",
        f"policy={policy}",
        "family=arith,dates",
        "lang=python",
        "tasks.eval_per_family=4",
        "tasks.train_per_family=1",
        "mode.preflight=false",
        *extra,
        f"hydra.run.dir={run_dir}",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    return {
        "oracle": _eval(root / "oracle", "oracle"),
        "wrong": _eval(root / "wrong", "wrong"),
        "other_seed": _eval(root / "other_seed", "oracle", "seed=1"),
    }


def _compare(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_piexp("compare", *map(str, args), timeout=300)


def test_compare_writes_table_json_and_plot_with_intervals(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _compare(runs["wrong"], runs["oracle"], "--out", out)
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "compare.json").read_text())
    overall = data["overall"]
    assert overall["tasks"] == 8
    wrong, oracle = overall["runs"]
    assert wrong["pass@1"] == 0.0 and oracle["pass@1"] == 1.0
    assert oracle["diff_pass@1"] == 1.0 and oracle["diff_pass@1"] - oracle["diff_pass@1_ci"] > 0
    assert oracle["diff_reward"] - oracle["diff_reward_ci"] > 0
    assert set(data["cells"]) == {"arith / python", "dates / python"}
    assert "| overall | 8 |" in (out / "compare.md").read_text()
    assert (out / "compare.png").stat().st_size > 1000


def test_identical_runs_differ_by_zero(runs: dict[str, Path], tmp_path: Path) -> None:
    result = _compare(runs["oracle"], runs["oracle"], "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    second = json.loads((tmp_path / "compare.json").read_text())["overall"]["runs"][1]
    assert second["diff_pass@1"] == 0.0 and second["diff_pass@1_ci"] == 0.0


def test_runs_on_different_tasks_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    result = _compare(runs["oracle"], runs["other_seed"], "--out", tmp_path / "out")
    assert result.returncode == 2
    assert "did not evaluate the same tasks: task" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_an_eval_run_is_refused(tmp_path: Path) -> None:
    result = _compare(tmp_path, tmp_path)
    # The message is wrapped to the console's width where the path happens to end.
    assert result.returncode == 2 and "not a finished eval run" in " ".join(result.stderr.split())
