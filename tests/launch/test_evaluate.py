"""mode=eval: the pass@k estimator, the results files, and resume after an interruption."""

from __future__ import annotations

import itertools
import json
from math import comb

import pytest

import piexp.harness.builtin as builtin_harness
import piexp.launch.evaluate as evaluate
from piexp.run_folder import RunFolder
from piexp.config.compose import load
from piexp.errors import UserError
from piexp.env.splits import build_splits

BASE = [
    "mode=eval",
    "family=[arith,dates]",
    "lang=[python,javascript]",
    "tasks.train_per_family=1",
    "tasks.eval_per_family=2",
]


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Share of all k-subsets of the n samples that contain a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(n, c, k) for n in range(1, 7) for c in range(n + 1) for k in range(1, n + 1)]
)
def test_pass_at_k_is_unbiased(n, c, k):
    assert evaluate.pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k))
    assert evaluate.pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(ValueError):
        evaluate.pass_at_k(2, 1, 3)


def test_oracle_eval_writes_results(sandbox_url, tmp_path):
    config = load([*BASE, "policy=oracle", "k=2"])
    assert evaluate.run_eval(config, tmp_path, sandbox_url, build_splits(config)) == 1.0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["policy"] == "oracle" and results["k"] == 2
    assert results["overall"]["episodes"] == 2 * 2 * 2 * 2  # families x tasks x languages x k
    for family in ("arith", "dates"):
        for language in ("python", "javascript"):
            cell = results["cells"][family][language]
            assert cell["pass@1"] == 1.0 and cell["pass@2"] == 1.0
            assert cell["reward_shaped"] == 1.0
            assert cell["metrics"]["functional_correct"] == 1.0
            assert cell["stop_reasons"] == {"completed": 4}
    markdown = (tmp_path / "results.md").read_text()
    assert "| arith | 1.000 | 1.000 |" in markdown and "pass@2" in markdown
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wrong_policy_eval_scores_zero(sandbox_url, tmp_path):
    config = load([*BASE, "policy=wrong", "family=[arith]", "lang=[python]"])
    assert evaluate.run_eval(config, tmp_path, sandbox_url, build_splits(config)) == 0.0
    results = json.loads((tmp_path / "results.json").read_text())
    cell = results["cells"]["arith"]["python"]
    assert cell["reward_binary"] == 0.0 and cell["reward_shaped"] == pytest.approx(0.3)
    markdown = (tmp_path / "results.md").read_text()
    failing = markdown.split("## Failing tasks", 1)[1].split("##", 1)[0]
    never = sorted(row["task_id"] for row in results["per_task"])
    assert f"- **arith x python**: never solved: {', '.join(never)}" in failing, failing
    for column in ("binary", "shaped", *evaluate.REWARD_METRICS):  # every column is explained
        assert f"- `{column}`: " in markdown, column


def test_results_markdown_stays_readable_for_many_samples_and_lists_partly_solved_tasks():
    """k = 16: pass@1, 2, 4, 8, 16 only; a task solved by 3 of 16 samples is named with its count."""
    cell = {
        "tasks": 1,
        "episodes": 16,
        **{f"pass@{j}": 0.5 for j in range(1, 17)},
        "reward_binary": 0.2,
        "reward_shaped": 0.5,
        "metrics": {name: 0.0 for name in evaluate.REWARD_METRICS},
        "stop_reasons": {"completed": 16},
        "tool_failures": evaluate.summarize_failures([]),
    }
    results = {
        "policy": "model",
        "checkpoint": None,
        "model": "m",
        "k": 16,
        "languages": ["python"],
        "cells": {"arith": {"python": cell}},
        "overall": cell,
        "per_task": [{"task_id": "eval-arith-0-00001", "family": "arith", "language": "python", "n": 16, "correct": 3}],
    }
    markdown = evaluate.results_markdown(results)
    header = next(line for line in markdown.splitlines() if line.startswith("| family | language | tasks"))
    assert [c.strip() for c in header.split("|") if c.strip().startswith("pass@")] == [
        "pass@1",
        "pass@2",
        "pass@4",
        "pass@8",
        "pass@16",
    ]
    assert "solved by some samples: eval-arith-0-00001 (3/16)" in markdown


class Interrupted(BaseException):
    """Stands in for Ctrl-C / a killed job: not an Exception, so nothing swallows it."""


def test_interrupted_eval_resumes_without_redoing_finished_episodes(sandbox_url, tmp_path, monkeypatch):
    config = load([*BASE, "policy=crash", "k=2", "mode.max_concurrency=1"])
    splits = build_splits(config)
    total = 2 * 2 * 2 * 2
    real = builtin_harness.run_episode  # what the builtin harness plays each episode with
    calls: list[tuple[str, str, int]] = []

    async def dies_after_three(policy, name, task, language, settings, *, sample=0, **options):
        if len(calls) == 3:
            raise Interrupted
        calls.append((task.task_id, language, sample))
        return await real(policy, name, task, language, settings, sample=sample, **options)

    monkeypatch.setattr(builtin_harness, "run_episode", dies_after_three)
    with pytest.raises(Interrupted):
        evaluate.run_eval(config, tmp_path, sandbox_url, splits)
    lines = (tmp_path / RunFolder.EPISODES).read_text().splitlines()
    done = {(r["task_id"], r["language"], r["sample"]) for r in map(json.loads, lines)}
    assert done == set(calls) and len(done) == 3
    assert not (tmp_path / "results.json").exists()

    rerun: list[tuple[str, str, int]] = []

    async def counting(policy, name, task, language, settings, *, sample=0, **options):
        rerun.append((task.task_id, language, sample))
        return await real(policy, name, task, language, settings, sample=sample, **options)

    monkeypatch.setattr(builtin_harness, "run_episode", counting)
    assert evaluate.run_eval(config, tmp_path, sandbox_url, splits) == 0.0
    assert len(rerun) == total - 3 and not done & set(rerun)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["overall"]["episodes"] == total
    assert len((tmp_path / RunFolder.EPISODES).read_text().splitlines()) == total

    # A third run has nothing left to do.
    rerun.clear()
    evaluate.run_eval(config, tmp_path, sandbox_url, splits)
    assert rerun == []


def test_resume_refuses_a_folder_of_another_policy(sandbox_url, tmp_path):
    config = load([*BASE, "policy=guess", "family=[arith]", "lang=[python]"])
    evaluate.run_eval(config, tmp_path, sandbox_url, build_splits(config))
    other = load([*BASE, "policy=crash", "family=[arith]", "lang=[python]"])
    with pytest.raises(UserError, match="different policy"):
        evaluate.run_eval(other, tmp_path, sandbox_url, build_splits(other))


def test_truncated_last_line_is_ignored(sandbox_url, tmp_path):
    config = load([*BASE, "policy=guess", "family=[arith]", "lang=[python]"])
    splits = build_splits(config)
    evaluate.run_eval(config, tmp_path, sandbox_url, splits)
    path = tmp_path / RunFolder.EPISODES
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])  # died mid-write
    evaluate.run_eval(config, tmp_path, sandbox_url, splits)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["overall"]["episodes"] == len(lines)
    readable = []
    for line in path.read_text().splitlines():
        try:
            readable.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    assert len(readable) == len(lines)  # the redone record is intact, on its own line
