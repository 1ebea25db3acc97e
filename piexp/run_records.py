"""Reading finished or running run folders back (`piexp summarize`, `piexp show`, a
train run's `summary.md`, `reproduce`, `rescore`): a run's manifest (`read_manifest`,
refusing a folder of a newer format than this piexp reads), which folders under a run or
sweep folder are jobs, and the per-step metrics tinker-cookbook logs to a train run's
`metrics.jsonl` (with the online controls' metrics piexp adds to each step,
`controls/...`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.files import read_jsonl
from piexp.run_files import FORMAT_VERSION, RunFiles


def read_manifest(run_dir: Path, *, needed_for: str | None = None) -> dict[str, Any] | None:
    """The run's `manifest.json`. Missing or unreadable: None, or, when `needed_for` says
    what needs it, the user's error naming that. Of a newer format than this piexp reads
    (`manifest_version` above `FORMAT_VERSION`): always the user's error, since its files
    may mean something else now. A folder written before the version was recorded reads
    as version 1."""
    path = run_dir / RunFiles.MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        if needed_for is None:
            return None
        raise UserError(
            f"{run_dir} has no {RunFiles.MANIFEST} (the run stopped before building its tasks), so {needed_for}."
        ) from None
    except (OSError, ValueError) as error:
        if needed_for is None:
            return None
        raise UserError(f"{path} cannot be read ({error}), so {needed_for}.") from None
    version = manifest.get("manifest_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise UserError(
            f"{run_dir} was written by a newer piexp (run-folder format {version}; this piexp reads up to "
            f"{FORMAT_VERSION}; piexp {(manifest.get('packages') or {}).get('piexp', 'unknown')} wrote it). Read "
            "it with that piexp or a newer one."
        )
    return manifest


# Suffix of a folder moved aside by --replace (summaries skip such folders).
REPLACED_MARK = ".replaced-"
# The per-step metrics log tinker-cookbook writes into a train run's folder.
METRICS_FILE = RunFiles.METRICS
# An eval run's finished episodes, one record a line (`piexp.launch.episodes.EpisodeLog`).
EPISODES_FILE = RunFiles.EPISODES
# A check run's (or preflight's) whole report (`piexp.launch.check`).
CHECK_FILE = RunFiles.CHECK
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
# A training step's episodes as the cookbook exports them (algo.rollout_json_export):
# one trajectory a line, with each transition's metrics and the trajectory's total reward.
ROLLOUTS_FILE = RunFiles.COOKBOOK_ROLLOUTS
EVAL_ROLLOUTS_SPLIT, TRAIN_ROLLOUTS_SPLIT = "eval_test", "train"


# Prefix of the online controls' metrics in a training step's row (piexp.env.task_sampler).
CONTROLS_PREFIX = "controls/"


def find_job_folders(root: Path) -> list[Path]:
    """Every run folder under `root` (itself included), in natural order (2 before 10)."""
    # Folders moved aside by --replace are not part of what is summarised.
    folders = {
        path.parent.parent
        for path in root.rglob(RunFiles.CONFIG)
        if not any(REPLACED_MARK in part for part in path.relative_to(root).parts)
    }
    if (root / RunFiles.CONFIG).is_file():
        folders.add(root)

    def natural(path: Path) -> list[Any]:
        parts = path.relative_to(root).parts
        return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in parts]

    return sorted(folders, key=natural)


def finite_number(value: Any) -> float | None:
    """`value` as a float if it is a finite number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def read_metrics(folder: Path) -> list[dict[str, Any]]:
    """The rows of a run folder's metrics.jsonl (none for a run that is not a train run)."""
    return read_jsonl(Path(folder) / METRICS_FILE)


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


def step_rollouts(folder: Path, split: str, step: int) -> list[dict[str, Any]]:
    """The trajectories of one step's exported rollouts (`ROLLOUTS_FILE`; none when the run
    did not export them)."""
    return read_jsonl(Path(folder) / ROLLOUTS_FILE.format(step=step, split=split))


def _rollout_steps(folder: Path, split: str) -> list[int]:
    steps = []
    for path in Path(folder).glob(ROLLOUTS_FILE.replace("{step:06d}", "*").format(split=split)):
        suffix = path.parent.name.removeprefix("iteration_")
        if suffix.isdigit():
            steps.append(int(suffix))
    return sorted(steps)


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
    for step in _rollout_steps(folder, EVAL_ROLLOUTS_SPLIT):
        trajectories = step_rollouts(folder, EVAL_ROLLOUTS_SPLIT, step)
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
