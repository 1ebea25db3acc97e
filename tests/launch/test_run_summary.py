"""A training run's summary.md claims a change of reward only beyond its 95% interval: it
wrote "Reward rose: -0.0625 -> -0.0594" for a model that learned nothing. Run folders as
tinker-cookbook leaves them (metrics.jsonl, each step's exported rollouts)."""

from __future__ import annotations

import json
from pathlib import Path

from piexp.launch.warm_start import write_summary


def _train_folder(run: Path, batches: dict[int, list[float]], eval_passes: dict[int, list[bool]]) -> Path:
    run.mkdir(parents=True)
    rows = []
    for step, rewards in batches.items():
        folder = run / f"iteration_{step:06d}"
        folder.mkdir()
        lines = [json.dumps({"total_reward": value, "steps": [{"metrics": {}}]}) for value in rewards]
        (folder / "train_rollout_summaries.jsonl").write_text("\n".join(lines) + "\n")
        row = {"step": step, "env/all/reward/total": sum(rewards) / len(rewards)}
        if step in eval_passes:
            passes = eval_passes[step]
            row |= {"test/env/all/passed": sum(passes) / len(passes), "test/env/all/total_episodes": len(passes)}
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run


def test_a_change_within_noise_is_not_called_a_rise(tmp_path: Path) -> None:
    noisy = [-0.1, 0.0, 0.15, -0.1, 0.0, 0.0, -0.1, 0.15]
    run = _train_folder(tmp_path / "run", {0: noisy, 1: [*noisy[1:], 0.0]}, {0: [False] * 8})
    summary = write_summary(run)
    assert "No change beyond noise" in summary and "rose" not in summary
    assert "95% interval over 8 and 8 episodes" in summary
    assert "| 0 | 0.000 | ± 0.000 | 8 |" in summary  # the eval split's pass@1 with its interval


def test_a_rise_beyond_its_interval_is_called_one(tmp_path: Path) -> None:
    run = _train_folder(tmp_path / "run", {0: [0.0, 0.15, 0.0, 0.15] * 4, 1: [1.0, 0.85, 1.0, 1.0] * 4}, {})
    summary = write_summary(run)
    assert "Reward rose beyond noise: 0.0750 (iteration 0) -> 0.9625 (iteration 1)" in summary
    assert "pass@1 on the eval split" not in summary  # no periodic eval: no pass rate, none invented
