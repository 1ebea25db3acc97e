"""What a train run's records say (`piexp summarize`, `piexp show`, a train run's
`summary.md`, the step lines): its key metrics' curves from the per-step metrics
tinker-cookbook logs (`RunFolder.metrics()`), pass@1 with its episode counts, and the
online controls' metrics piexp adds to each step (`controls/...`). The files themselves
are read through `piexp.run_folder.RunFolder`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.run_folder import RunFolder

# metrics.jsonl keys per key metric of a train run (first present wins): `pass@1` is the
# share of the periodic eval's episodes on the eval split that passed (one sample per
# task: `passed`, which every episode reports once, piexp.env.reward.PASSED_METRIC; never
# the eval's reward, which holds -0.1 for an episode that overflowed or failed to run),
# `reward` the mean reward of each training batch (the older cookbook logged it with a
# `/mean` suffix). `train_pass_curve` reads pass@1 with its episode counts.
TRAIN_KEYS: dict[str, tuple[str, ...]] = {
    "pass@1": ("test/env/all/passed",),
    "reward": ("env/all/reward/total", "env/all/reward/total/mean"),
}
# How many episodes a step's periodic eval played (the denominator of its pass@1).
EVAL_EPISODES_KEY = "test/env/all/total_episodes"
# The splits of a training step's exported episodes (`RunFolder.rollouts`).
EVAL_ROLLOUTS_SPLIT, TRAIN_ROLLOUTS_SPLIT = "eval_test", "train"


# Prefix of the online controls' metrics in a training step's row (piexp.env.task_sampler).
CONTROLS_PREFIX = "controls/"


def finite_number(value: Any) -> float | None:
    """`value` as a float if it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def metric_curve(rows: list[dict[str, Any]], metric: str) -> list[tuple[int, float]]:
    """(step, value) of a key metric (`TRAIN_KEYS`) over the rows, from the first of its
    keys that has any value; a row without `step` counts by its position."""
    for key in TRAIN_KEYS[metric]:
        curve = [
            (int(row.get("step", index)), value)
            for index, row in enumerate(rows)
            if (value := finite_number(row.get(key))) is not None
        ]
        if curve:
            return curve
    return []


@dataclass(frozen=True)
class PassPoint:
    """pass@1 of one training step's periodic eval: the share of its eval episodes that
    passed, and how many episodes it played (None when only the share was logged)."""

    step: int
    rate: float
    episodes: int | None


def trajectory_passed(trajectory: dict[str, Any]) -> bool:
    """An exported trajectory's binary outcome: its last transition graded all four steps
    as holding (an episode that ended before grading reports no `functional_correct`)."""
    steps = trajectory.get("steps") or []
    metrics = (steps[-1].get("metrics") or {}) if steps else {}
    return metrics.get("functional_correct") == 1.0


def train_pass_curve(folder: Path, rows: list[dict[str, Any]]) -> list[PassPoint]:
    """pass@1 per step of a training run's periodic evals on its eval split: from
    metrics.jsonl's `passed` share with the step's eval episode count, or, for a run
    logged without `passed`, from each step's exported eval rollouts. Empty when the run
    evaluated nothing (no eval split, or no eval step yet): absent, never another figure."""
    points: dict[int, PassPoint] = {}
    for index, row in enumerate(rows):
        rate = finite_number(row.get(TRAIN_KEYS["pass@1"][0]))
        if rate is not None:
            count = finite_number(row.get(EVAL_EPISODES_KEY))
            step = int(row.get("step", index))
            points[step] = PassPoint(step, rate, int(count) if count is not None else None)
    if points:
        return [points[step] for step in sorted(points)]
    run = RunFolder(folder)
    for step in run.rollout_steps(EVAL_ROLLOUTS_SPLIT):
        trajectories = run.rollouts(EVAL_ROLLOUTS_SPLIT, step)
        if trajectories:
            passed = sum(trajectory_passed(t) for t in trajectories)
            points[step] = PassPoint(step, passed / len(trajectories), len(trajectories))
    return [points[step] for step in sorted(points)]


def control_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per training step with any, its online controls' metrics (informative fraction,
    groups dropped by the gate, pool sizes, levels): `{"step": n, "controls/...": value}`;
    a step logged twice (a resumed run) keeps its last row."""
    steps: dict[int, dict[str, Any]] = {}
    for index, row in enumerate(rows):
        values = {
            key: value
            for key, raw in row.items()
            if key.startswith(CONTROLS_PREFIX) and (value := finite_number(raw)) is not None
        }
        if values:
            steps[int(row.get("step", index))] = values
    return [{"step": step, **values} for step, values in sorted(steps.items())]


def controls_table(rows: list[dict[str, Any]]) -> list[str]:
    """`control_rows` as a markdown table: a row per step, a column per control metric
    (prefix dropped), `-` where a step has no value."""
    keys = list(dict.fromkeys(key for row in rows for key in row if key != "step"))
    lines = ["| step | " + " | ".join(key.removeprefix(CONTROLS_PREFIX) for key in keys) + " |"]
    lines.append("| --- |" + " --- |" * len(keys))
    for row in rows:
        cells = ("-" if row.get(key) is None else f"{row[key]:.6g}" for key in keys)
        lines.append(f"| {row['step']} | " + " | ".join(cells) + " |")
    return lines
