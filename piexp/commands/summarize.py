"""`python -m piexp summarize DIR`: one table and one plot per key metric over a run or a
multirun folder.

Why: a sweep leaves one folder per job, each with its own results; comparing them by
opening files one at a time is how mistakes get made. This reads every job folder under
DIR (any folder holding `.hydra/config.yaml`) and writes, into DIR:

* `runs_summary.csv` and `runs_summary.md` (never a run's own `summary.md`): one row per job with its overrides (those that differ
  between the jobs first, so the swept values stand out), its state, and the final and
  best value of each key metric;
* `runs_summary_<metric>.png` per key metric: reward curves over training steps for train
  runs, bars for eval runs (one value per run).

Key metrics, and where they come from:

* `pass@1`: eval runs: `results.json` `overall.pass@1`. Train runs: tinker-cookbook's
  `metrics.jsonl`, the periodic eval on the eval split (`test/env/all/reward/total`, which
  piexp grades with the binary reward, one sample per task: that is pass@1).
* `reward`: eval runs: `overall.reward_shaped` (mean shaped reward); train runs:
  `env/all/reward/total` (mean reward of each training batch, in the run's reward mode).

"final" is the last value (eval: the only one), "best" the highest. Eval runs also get a
`tool_failures` column: the tool-call failures that occurred, with counts
(`results.json` `overall.tool_failures`; `piexp.transcripts.failures` says what each is).
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from piexp.errors import UserError
from piexp.run_records import TRAIN_KEYS, find_job_folders, finite_number, metric_curve, read_metrics
from piexp.stats import mean_ci95
from piexp.sweeps import STATUS_SUBDIR
from piexp.sweeps.marker import read_marker
from piexp.sweeps.status import STATUS_JSON
from piexp.transcripts.failures import failure_digest

KEY_METRICS = ("pass@1", "reward")
_MAX_UPRIGHT_BARS = 8  # beyond this many eval runs the bar plot turns horizontal
# Stem of the files summarize writes: never a run's own `summary.md` (a train run's verdict).
OUTPUT_STEM = "runs_summary"
# results.json `overall` keys per key metric for eval runs.
EVAL_KEYS: dict[str, str] = {"pass@1": "pass@1", "reward": "reward_shaped"}


def eval_keys(config: Any) -> dict[str, str]:
    """`results.json` keys per key metric for an eval run: its reward is the reward of the
    run's own reward mode (reward=binary: the binary reward), as in training."""
    reward = config.get("reward") if isinstance(config, dict) else None
    binary = isinstance(reward, dict) and reward.get("mode") == "binary"
    return {**EVAL_KEYS, "reward": "reward_binary" if binary else EVAL_KEYS["reward"]}


@dataclass
class JobSummary:
    folder: Path
    name: str
    mode: str
    overrides: list[str]
    state: str
    finals: dict[str, float | None] = field(default_factory=dict)
    bests: dict[str, float | None] = field(default_factory=dict)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    steps: int | None = None
    tool_failures: str = ""  # eval runs: failure kinds that occurred, with counts
    cells: dict[str, float | None] = field(default_factory=dict)  # eval runs: "family x language" -> pass@1


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _sweep_states(root: Path) -> dict[str, str]:
    """Job folder (resolved) -> state, from the sweep status files under root."""
    states: dict[str, str] = {}
    for path in root.rglob(STATUS_JSON):
        data = _read_json(path) or {}
        for entry in (data.get("jobs") or {}).values():
            if isinstance(entry, dict) and entry.get("dir") and entry.get("state"):
                states[str(Path(entry["dir"]).resolve())] = str(entry["state"])
                # Job folders are recorded as Hydra saw them (maybe relative to its cwd).
                states[str((path.parent / Path(entry["dir"]).name).resolve())] = str(entry["state"])
                if path.parent.name == STATUS_SUBDIR.name:  # a single run's own table
                    states[str(path.parent.parent.resolve())] = str(entry["state"])
    return states


def summarize_job(folder: Path, root: Path, states: dict[str, str]) -> JobSummary:
    config = _read_yaml(folder / ".hydra" / "config.yaml") or {}
    mode = str(((config.get("mode") or {}) if isinstance(config, dict) else {}).get("name", "?"))
    overrides = _read_yaml(folder / ".hydra" / "overrides.yaml") or []
    name = str(folder.relative_to(root)) if folder != root else folder.resolve().name
    state = states.get(str(folder.resolve()))
    if state is None:
        state = "complete" if read_marker(folder) is not None else "incomplete"
    job = JobSummary(folder=folder, name=name, mode=mode, overrides=[str(o) for o in overrides], state=state)

    results = _read_json(folder / "results.json")
    if isinstance(results, dict) and isinstance(results.get("overall"), dict):
        for metric, key in eval_keys(config).items():
            value = finite_number(results["overall"].get(key))
            job.finals[metric] = job.bests[metric] = value
        job.tool_failures = _failure_column(results["overall"])
        for family, row in (results.get("cells") or {}).items():
            for language, cell in (row or {}).items():
                if isinstance(cell, dict):
                    job.cells[f"{family} x {language}"] = finite_number(cell.get("pass@1"))
    rows = read_metrics(folder)
    if rows:
        for metric in TRAIN_KEYS:
            curve = metric_curve(rows, metric)
            if curve:
                job.curves[metric] = curve
                job.finals[metric] = curve[-1][1]
                job.bests[metric] = max(value for _, value in curve)
        steps = [int(row["step"]) for row in rows if isinstance(row.get("step"), int)]
        job.steps = max(steps) + 1 if steps else len(rows)
    return job


def _failure_column(overall: dict[str, Any]) -> str:
    return failure_digest(overall.get("tool_failures"))


def varying_overrides(jobs: Sequence[JobSummary]) -> list[list[str]]:
    """Per job, the overrides not shared by every job (all of them for a single job)."""
    if len(jobs) < 2:
        return [list(job.overrides) for job in jobs]
    common = set(jobs[0].overrides).intersection(*(set(job.overrides) for job in jobs[1:]))
    return [[o for o in job.overrides if o not in common] for job in jobs]


# ---------------------------------------------------------------------------- writing


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def table_rows(jobs: Sequence[JobSummary]) -> tuple[list[str], list[list[str]]]:
    header = ["job", "mode", "state", "overrides", "all_overrides", "steps"]
    for metric in KEY_METRICS:
        header += [f"final_{metric}", f"best_{metric}"]
    header.append("tool_failures")
    rows = []
    for job, varying in zip(jobs, varying_overrides(jobs)):
        row = [job.name, job.mode, job.state, " ".join(varying), " ".join(job.overrides),
               "" if job.steps is None else str(job.steps)]
        for metric in KEY_METRICS:
            row += [_fmt(job.finals.get(metric)), _fmt(job.bests.get(metric))]
        row.append(job.tool_failures)
        rows.append(row)
    return header, rows


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def markdown(root: Path, header: list[str], rows: list[list[str]]) -> str:
    shown = [i for i, name in enumerate(header) if name != "all_overrides"]

    def cell(text: str) -> str:
        return text.replace("|", "\\|") or "-"

    lines = [f"# Summary of {root}", "", f"{len(rows)} job(s). pass@1: eval split, binary reward; "
             "reward: mean reward in the run's reward mode (eval runs) or training-batch reward (train runs).", "",
             "| " + " | ".join(header[i] for i in shown) + " |",
             "| " + " | ".join("---" for _ in shown) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(cell(row[i]) for i in shown) + " |")
    return "\n".join(lines) + "\n"


def states_markdown(jobs: Sequence[JobSummary]) -> str:
    """The jobs that did not finish, failed and interrupted apart (they need different
    actions: a failure is read, an interruption is rerun)."""
    lines = []
    for state in ("failed", "interrupted", "stale", "running", "incomplete"):
        names = [job.name for job in jobs if job.state == state]
        if names:
            lines.append(f"- {state}: {len(names)} ({', '.join(names)})")
    return ("\nJobs that did not complete:\n\n" + "\n".join(lines) + "\n") if lines else ""


def seed_groups(jobs: Sequence[JobSummary]) -> dict[str, list[JobSummary]]:
    """Jobs grouped by their varying overrides other than `seed`: the runs of one setting."""
    groups: dict[str, list[JobSummary]] = {}
    for job, varying in zip(jobs, varying_overrides(jobs)):
        key = " ".join(o for o in varying if o.split("=", 1)[0].lstrip("+~") != "seed") or "(all)"
        groups.setdefault(key, []).append(job)
    return groups


def seed_groups_markdown(jobs: Sequence[JobSummary]) -> str:
    """Mean over seeds with a 95% confidence interval, when some setting ran with several seeds."""
    groups = seed_groups(jobs)
    if all(len(members) < 2 for members in groups.values()):
        return ""
    lines = ["", "Over seeds (jobs that differ only by seed; mean ± 95% confidence interval, complete jobs):", "",
             "| setting | seeds | " + " | ".join(f"final_{m}" for m in KEY_METRICS) + " |",
             "| --- | --- | " + " | ".join("---" for _ in KEY_METRICS) + " |"]
    for setting, members in groups.items():
        cells = []
        for metric in KEY_METRICS:
            values = _finished_values(members, metric)
            if not values:
                cells.append("-")
                continue
            mean, half = mean_ci95(values)
            cells.append(f"{mean:.3f}" + ("" if half is None else f" ± {half:.3f}"))
        lines.append(f"| {setting.replace('|', chr(92) + '|')} | {len(members)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def cells_markdown(jobs: Sequence[JobSummary]) -> str:
    """pass@1 of every eval job per family x language: one row per job, a column per cell."""
    names = list(dict.fromkeys(name for job in jobs for name in job.cells))
    if not names:
        return ""
    lines = ["", "## pass@1 by family x language", "", "| job | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names)]
    for job in jobs:
        if job.cells:
            lines.append(f"| {job.name} | " + " | ".join(_fmt(job.cells.get(name)) for name in names) + " |")
    return "\n".join(lines) + "\n"


def _label(job: JobSummary, varying: list[str]) -> str:
    return f"{job.name}: {' '.join(varying)}" if varying else job.name


def plot_metric(metric: str, jobs: Sequence[JobSummary], path: Path) -> bool:
    """Curves over steps for jobs with a training curve, otherwise bars of the eval
    value; returns False (and writes nothing) when no job has the metric."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labelled = list(zip(jobs, varying_overrides(jobs)))
    curves = [(job, varying) for job, varying in labelled if job.curves.get(metric)]
    bars = [(job, varying, value) for job, varying in labelled if (value := job.finals.get(metric)) is not None]
    if not curves and not bars:
        return False
    figure, axes = plt.subplots(figsize=(8, 4.5))
    if curves:
        for job, varying in curves:
            steps, values = zip(*job.curves[metric])
            axes.plot(steps, values, marker="." if len(steps) < 30 else None, label=_label(job, varying))
        axes.set_xlabel("step")
        axes.legend(fontsize="small", loc="best")
        axes.set_title(f"{metric} over training")
    elif len(bars) > _MAX_UPRIGHT_BARS:
        # Many runs: one horizontal bar each, the figure as tall as the labels need.
        figure.set_size_inches(8, 1.0 + 0.28 * len(bars))
        labels = [_label(job, varying) for job, varying, _value in bars]
        heights = [value for _job, _varying, value in bars]
        positions = list(range(len(bars)))[::-1]
        axes.barh(positions, heights, color="tab:blue")
        for y, value in zip(positions, heights):
            axes.annotate(f"{value:.3f}", (value, y), ha="left", va="center", fontsize="x-small")
        axes.set_yticks(positions, labels, fontsize="x-small")
        axes.set_title(f"{metric} per run")
        axes.set_xlabel(metric)
        if metric == "pass@1":
            axes.set_xlim(0, 1.1)
    else:
        labels = [_label(job, varying) for job, varying, _value in bars]
        heights = [value for _job, _varying, value in bars]
        positions = list(range(len(bars)))
        axes.bar(positions, heights, color="tab:blue")
        for x, value in zip(positions, heights):
            axes.annotate(f"{value:.3f}", (x, value), ha="center", va="bottom", fontsize="small")
        axes.set_xticks(positions, labels, rotation=30 if len(bars) > 3 else 0, ha="right" if len(bars) > 3 else "center", fontsize="small")
        axes.set_title(f"{metric} per run")
        if metric == "pass@1":
            axes.set_ylim(0, 1.05)
    if not bars or curves or len(bars) <= _MAX_UPRIGHT_BARS:
        axes.set_ylabel(metric)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def _finished_values(members: Sequence[JobSummary], metric: str) -> list[float]:
    return [v for job in members if job.state in ("complete", "skipped") and (v := job.finals.get(metric)) is not None]


def plot_seed_means(metric: str, jobs: Sequence[JobSummary], path: Path) -> bool:
    """One bar per setting run with several seeds: the mean over its finished seeds with
    a 95% confidence interval; False (nothing written) when no setting has two seeds."""
    groups = {setting: values for setting, members in seed_groups(jobs).items()
              if len(values := _finished_values(members, metric)) >= 2}
    if not groups:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = {setting: mean_ci95(values) for setting, values in groups.items()}
    figure, axes = plt.subplots(figsize=(8, 1.0 + 0.4 * len(stats)))
    positions = list(range(len(stats)))[::-1]
    axes.barh(positions, [mean for mean, _ in stats.values()], xerr=[half or 0.0 for _, half in stats.values()],
              color="tab:blue", capsize=4)
    axes.set_yticks(positions, [f"{setting} ({len(groups[setting])} seeds)" for setting in stats], fontsize="small")
    axes.set_xlabel(f"final {metric}, mean over seeds ± 95% CI")
    if metric == "pass@1":
        axes.set_xlim(0, 1.05)  # an interval of two seeds can reach far past the possible range
    axes.set_title(f"{metric} per setting over seeds")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_cells(jobs: Sequence[JobSummary], path: Path) -> bool:
    """pass@1 of every eval job (rows) per family x language (columns), values in the
    cells; False (nothing written) when no job has a per-cell breakdown."""
    rows = [job for job in jobs if job.cells]
    names = list(dict.fromkeys(name for job in rows for name in job.cells))
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [[float("nan") if (value := job.cells.get(name)) is None else value for name in names] for job in rows]
    figure, axes = plt.subplots(figsize=(2.5 + 1.1 * len(names), 1.2 + 0.35 * len(rows)))
    image = axes.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize="small")
    axes.set_yticks(range(len(rows)), [_label(job, varying) for job, varying in zip(rows, varying_overrides(rows))],
                    fontsize="small")
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            if value == value:  # not nan
                axes.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize="x-small",
                          color="black" if value > 0.6 else "white")
    axes.set_title("pass@1 by family x language")
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def summarize(root: Path, out_dir: Path | None = None) -> dict[str, Path]:
    """Write the summary files of `root` into `out_dir` (default: root); returns them."""
    root = Path(root)
    if not root.exists():
        raise UserError(f"Cannot summarize {root}: it does not exist. Give a run folder "
                        "(outputs/DATE/TIME) or a multirun folder (multirun/DATE/TIME).")
    if not root.is_dir():
        raise UserError(f"Cannot summarize {root}: it is not a folder. Give a run folder "
                        "(outputs/DATE/TIME) or a multirun folder (multirun/DATE/TIME).")
    folders = find_job_folders(root)
    if not folders:
        raise UserError(f"Cannot summarize {root}: no piexp run was found in it (a run folder holds "
                        ".hydra/config.yaml). Give a run folder (outputs/DATE/TIME) or a multirun "
                        "folder (multirun/DATE/TIME).")
    out_dir = Path(out_dir) if out_dir is not None else root
    out_dir.mkdir(parents=True, exist_ok=True)
    states = _sweep_states(root)
    jobs = [summarize_job(folder, root, states) for folder in folders]
    header, rows = table_rows(jobs)
    written = {"csv": out_dir / f"{OUTPUT_STEM}.csv", "md": out_dir / f"{OUTPUT_STEM}.md"}
    write_csv(written["csv"], header, rows)
    written["md"].write_text(markdown(root, header, rows) + cells_markdown(jobs) + states_markdown(jobs)
                             + seed_groups_markdown(jobs), encoding="utf-8")
    for metric in KEY_METRICS:
        path = out_dir / f"{OUTPUT_STEM}_{metric}.png"
        if plot_metric(metric, jobs, path):
            written[metric] = path
        path = out_dir / f"{OUTPUT_STEM}_{metric}_over_seeds.png"
        if plot_seed_means(metric, jobs, path):
            written[f"{metric}_over_seeds"] = path
    if plot_cells(jobs, out_dir / f"{OUTPUT_STEM}_cells.png"):
        written["cells"] = out_dir / f"{OUTPUT_STEM}_cells.png"
    return written


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="piexp summarize",
        description="Table (CSV, Markdown) and plots of a run folder or a multirun folder.",
    )
    parser.add_argument("dir", type=Path, help="a run folder or a multirun (sweep) folder")
    parser.add_argument("--out", type=Path, default=None, help="where to write the summary (default: DIR)")
    args = parser.parse_args(list(argv))
    written = summarize(args.dir, args.out)
    print(written["md"].read_text(encoding="utf-8"), end="")
    print("wrote " + ", ".join(str(path) for path in written.values()))
    return 0
