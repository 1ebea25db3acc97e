"""Eval runs side by side (`python -m piexp compare`, and the training loop's
`compare.md`): per family x language cell and overall, pass@k and mean shaped reward of
every run, each later run's difference from the first with a paired 95% t-interval over
tasks, refused when the runs did not evaluate the same tasks; written as compare.md,
compare.json and compare.png."""

from __future__ import annotations

from piexp.run_folder import RunFolder, harness_label

import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.files import read_jsonl
from piexp.stats import mean_ci95, pass_at_k

RESULTS_FILE = RunFolder.RESULTS


class CompareError(UserError):
    """The runs cannot be compared (not eval runs, or not the same tasks)."""


@dataclass(frozen=True)
class TaskResult:
    family: str
    samples: int
    correct: int
    shaped: float  # mean shaped reward over the task's samples


@dataclass(frozen=True)
class Run:
    folder: Path
    label: str
    tasks: dict[tuple[str, str], TaskResult]  # (task_id, language) -> result
    digests: dict[str, str]  # task_id -> content digest
    harness: dict[str, str]  # the harness that played its episodes, with its versions


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (0 for a single value)."""
    mean, half = mean_ci95(values)
    return mean, half or 0.0


def load_run(folder: Path) -> Run:
    episodes = folder / RunFolder.EPISODES
    if not (folder / RESULTS_FILE).is_file() or not episodes.is_file():
        raise CompareError(f"{folder} is not a finished eval run (it needs {RESULTS_FILE} and {RunFolder.EPISODES}; "
                           "run `python -m piexp mode=eval ...` to make one)")  # fmt: skip
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    digests: dict[str, str] = {}
    for record in read_jsonl(episodes):  # skips a line cut short by an interruption
        grouped[(record["task_id"], record["language"])].append(record)
        digests[record["task_id"]] = record.get("task_digest", "")
    tasks = {
        key: TaskResult(family=records[0]["family"], samples=len(records),
                        correct=sum(r["reward"] == 1.0 for r in records),
                        shaped=statistics.fmean(float(r["shaped"]) for r in records))
        for key, records in grouped.items()
    }  # fmt: skip
    results = RunFolder(folder).json_record(RESULTS_FILE)
    recorded = results.get("harness") if isinstance(results, dict) else None
    harness = recorded if isinstance(recorded, dict) else RunFolder(folder).harness()
    return Run(folder=folder, label=folder.name, tasks=tasks, digests=digests, harness=harness)


def check_same_tasks(runs: Sequence[Run]) -> None:
    first = runs[0]
    for other in runs[1:]:
        for task_id in sorted(set(first.digests) | set(other.digests)):
            mine, theirs = first.digests.get(task_id), other.digests.get(task_id)
            if mine != theirs:
                why = ("is missing from " + str(other.folder if theirs is None else first.folder)
                       if mine is None or theirs is None else "was generated differently")  # fmt: skip
                raise CompareError(f"{first.folder} and {other.folder} did not evaluate the same tasks: task "
                                   f"{task_id} {why}. Compare runs with the same seed, families, task counts and "
                                   "family parameters.")  # fmt: skip
        if set(first.tasks) != set(other.tasks):
            task_id, language = sorted(set(first.tasks) ^ set(other.tasks))[0]
            raise CompareError(f"{first.folder} and {other.folder} did not evaluate the same tasks: task {task_id} "
                               f"in {language} is in only one of them.")  # fmt: skip


def _cell(runs: Sequence[Run], keys: list[tuple[str, str]], k: int) -> dict[str, Any]:
    cell: dict[str, Any] = {"tasks": len(keys), "runs": []}
    for index, run in enumerate(runs):
        results = [run.tasks[key] for key in keys]
        entry: dict[str, Any] = {"run": run.label, "harness": harness_label(run.harness)}
        for j in range(1, k + 1):
            entry[f"pass@{j}"] = statistics.fmean(pass_at_k(r.samples, r.correct, j) for r in results)
        entry["reward"], entry["reward_ci"] = mean_interval([r.shaped for r in results])
        entry["pass@1_ci"] = mean_interval([r.correct / r.samples for r in results])[1]
        if index:
            base = [runs[0].tasks[key] for key in keys]
            diff_pass = [r.correct / r.samples - b.correct / b.samples for r, b in zip(results, base, strict=True)]
            diff_reward = [r.shaped - b.shaped for r, b in zip(results, base, strict=True)]
            entry["diff_pass@1"], entry["diff_pass@1_ci"] = mean_interval(diff_pass)
            entry["diff_reward"], entry["diff_reward_ci"] = mean_interval(diff_reward)
        cell["runs"].append(entry)
    return cell


def compare(runs: Sequence[Run]) -> dict[str, Any]:
    check_same_tasks(runs)
    keys = sorted(runs[0].tasks)
    k = min(result.samples for run in runs for result in run.tasks.values())
    cells: dict[str, Any] = {}
    by_cell: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for key in keys:
        by_cell[(runs[0].tasks[key].family, key[1])].append(key)
    for (family, language), cell_keys in sorted(by_cell.items()):
        cells[f"{family} / {language}"] = _cell(runs, cell_keys, k)
    return {
        "runs": [str(run.folder) for run in runs],
        "harnesses": [run.harness for run in runs],
        "k": k,
        "interval": "95% paired t-interval over tasks (mean +- t(0.975, n-1) sd / sqrt(n))",
        "overall": _cell(runs, keys, k),
        "cells": cells,
    }


def markdown(result: dict[str, Any]) -> str:
    k = result["k"]
    harnesses = result.get("harnesses") or [None] * len(result["runs"])
    named = [f"{run} (harness {harness_label(harness)})" for run, harness in zip(result["runs"], harnesses)]
    lines = ["# Comparison of eval runs", "", f"Runs: {', '.join(named)}.",
             f"Differences are against the first run; intervals: {result['interval']}.", "",
             "| cell | tasks | run | " + " | ".join(f"pass@{j}" for j in range(1, k + 1))
             + " | mean reward | diff pass@1 | diff reward |",
             "|---|---|---|" + "---|" * (k + 3)]  # fmt: skip
    for name, cell in [("overall", result["overall"]), *result["cells"].items()]:
        for entry in cell["runs"]:
            diff = ("| — | — |" if "diff_pass@1" not in entry else
                    f"| {entry['diff_pass@1']:+.3f} ± {entry['diff_pass@1_ci']:.3f} "
                    f"| {entry['diff_reward']:+.3f} ± {entry['diff_reward_ci']:.3f} |")  # fmt: skip
            lines.append(f"| {name} | {cell['tasks']} | {entry['run']} ({entry.get('harness', 'builtin')}) | "
                         + " | ".join(f"{entry[f'pass@{j}']:.3f}" for j in range(1, k + 1))
                         + f" | {entry['reward']:.3f} ± {entry['reward_ci']:.3f} {diff}")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [("overall", result["overall"]), *result["cells"].items()]
    runs = [entry["run"] for entry in result["overall"]["runs"]]
    width = 0.8 / len(runs)
    figure, axes = plt.subplots(1, 2, figsize=(4 + 1.6 * len(cells) * len(runs) ** 0.5, 3.6))
    for axis, metric, title in ((axes[0], "pass@1", "pass@1"), (axes[1], "reward", "mean shaped reward")):
        for index, run in enumerate(runs):
            values = [cell["runs"][index][metric] for _, cell in cells]
            errors = [cell["runs"][index][f"{metric}_ci"] for _, cell in cells]
            axis.bar([c + index * width for c in range(len(cells))], values, width, yerr=errors, capsize=3, label=run)
        axis.set_xticks([c + width * (len(runs) - 1) / 2 for c in range(len(cells))], [name for name, _ in cells],
                        rotation=20, ha="right")  # fmt: skip
        axis.set_title(f"{title} (95% CI over tasks)")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_comparison(folders: Sequence[Path], out: Path) -> str:
    """Compare the eval runs in `folders` (the first is the baseline); write compare.md,
    compare.json and compare.png into `out` and return the markdown."""
    result = compare([load_run(folder) for folder in folders])
    out.mkdir(parents=True, exist_ok=True)
    (out / RunFolder.COMPARE_JSON).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    text = markdown(result)
    (out / RunFolder.COMPARE_MD).write_text(text, encoding="utf-8")
    plot(result, out / RunFolder.COMPARE_PNG)
    return text
