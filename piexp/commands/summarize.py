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

* `pass@1`: the share of the eval split's episodes that passed (binary reward 1, one
  sample a task), with the half-width of its 95% interval (`pass@1_ci95`). Eval runs:
  `results.json` `overall.pass@1` (the interval over its tasks). Train runs: the periodic
  eval on the eval split (`metrics.jsonl`'s `test/env/all/passed` over its
  `total_episodes`, or each step's exported eval rollouts; piexp.run_records.train_pass_curve),
  never the eval's reward (which holds -0.1 for an episode that overflowed); absent when
  the run evaluated nothing.
* `reward`: eval runs: `overall.reward_shaped` (mean shaped reward); train runs:
  `env/all/reward/total` (mean reward of each training batch, in the run's reward mode).

Train runs whose steps record the online controls (`controls/...` in metrics.jsonl: the
fraction of informative groups, groups the binary gate dropped, pool sizes, each adapted
family's level) also get a table of them per step and `runs_summary_controls.png`.

"final" is the last value (eval: the only one), "best" the highest. When no job trained,
`runs_summary.md` (what is printed) shows each metric once, without `steps` and `best_`
columns that would only repeat it; the CSV keeps every column for scripts. Eval runs also get a
`tool_failures` column: the tool-call failures that occurred, with counts
(`results.json` `overall.tool_failures`; `piexp.transcripts.failures` says what each is).
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

from piexp.run_folder import RunFolder
from piexp.commands.job_summary import (
    KEY_METRICS,
    JobSummary,
    finished_values,
    seed_groups,
    summarize_job,
    sweep_states,
    varying_overrides,
)
from piexp.commands.summary_plots import plot_cells, plot_controls, plot_metric, plot_seed_means
from piexp.errors import UserError
from piexp.run_records import controls_table
from piexp.stats import mean_ci95

# The half-width of the final pass@1's 95% interval (JobSummary.final_pass_ci).
PASS_CI_COLUMN = "pass@1_ci95"
# Stem of the files summarize writes: never a run's own `summary.md` (a train run's verdict).
OUTPUT_STEM = "runs_summary"


# ---------------------------------------------------------------------------- writing


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def table_rows(jobs: Sequence[JobSummary]) -> tuple[list[str], list[list[str]]]:
    header = ["job", "mode", "harness", "state", "overrides", "all_overrides", "steps"]
    for metric in KEY_METRICS:
        header += [f"final_{metric}", f"best_{metric}"]
        if metric == "pass@1":
            header.append(PASS_CI_COLUMN)
    header.append("tool_failures")
    rows = []
    for job, varying in zip(jobs, varying_overrides(jobs)):
        row = [
            job.name,
            job.mode,
            job.harness,
            job.state + (f" ({job.not_run} episodes not run)" if job.not_run else ""),
            " ".join(varying),
            " ".join(job.overrides),
            "" if job.steps is None else str(job.steps),
        ]
        for metric in KEY_METRICS:
            row += [_fmt(job.finals.get(metric)), _fmt(job.bests.get(metric))]
            if metric == "pass@1":
                row.append(_fmt(job.final_pass_ci))
        row.append(job.tool_failures)
        rows.append(row)
    return header, rows


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def trained(jobs: Sequence[JobSummary]) -> bool:
    """Whether any job has training steps (else final = best, and there are no steps)."""
    return any(job.steps is not None or job.curves for job in jobs)


def markdown(root: Path, header: list[str], rows: list[list[str]], *, training: bool = True) -> str:
    hidden = {"all_overrides"} | (set() if training else {"steps", *(f"best_{metric}" for metric in KEY_METRICS)})
    shown = [i for i, name in enumerate(header) if name not in hidden]
    names = [header[i] if training else header[i].removeprefix("final_") for i in shown]

    def cell(text: str) -> str:
        return text.replace("|", "\\|") or "-"

    lines = [
        f"# Summary of {root}",
        "",
        f"{len(rows)} job(s). pass@1: the share of the eval split's episodes that passed (binary reward 1, "
        f"one sample a task; train runs: the last periodic eval), `{PASS_CI_COLUMN}` the half-width of its 95% "
        "interval; reward: mean reward in the run's reward mode (eval runs) or training-batch reward (train runs).",
        "",
        "| " + " | ".join(names) + " |",
        "| " + " | ".join("---" for _ in shown) + " |",
    ]
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


def seed_groups_markdown(jobs: Sequence[JobSummary]) -> str:
    """Mean over seeds with a 95% confidence interval, when some setting ran with several seeds."""
    groups = seed_groups(jobs)
    if all(len(members) < 2 for members in groups.values()):
        return ""
    prefix = "final_" if trained(jobs) else ""
    lines = [
        "",
        "Over seeds (jobs that differ only by seed; mean ± 95% confidence interval, complete jobs):",
        "",
        "| setting | seeds | " + " | ".join(f"{prefix}{m}" for m in KEY_METRICS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in KEY_METRICS) + " |",
    ]
    for setting, members in groups.items():
        cells = []
        for metric in KEY_METRICS:
            values = finished_values(members, metric)
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
    lines = [
        "",
        "## pass@1 by family x language",
        "",
        "| job | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for job in jobs:
        if job.cells:
            lines.append(f"| {job.name} | " + " | ".join(_fmt(job.cells.get(name)) for name in names) + " |")
    return "\n".join(lines) + "\n"


def controls_markdown(jobs: Sequence[JobSummary]) -> str:
    """Each train job's online controls per step (a column per `controls/` metric)."""
    lines = []
    for job in jobs:
        if not job.controls:
            continue
        lines += ["", f"### {job.name}", "", *controls_table(job.controls)]
    if not lines:
        return ""
    return "\n## Online controls per training step\n" + "\n".join(lines) + "\n"


def summarize(root: Path, out_dir: Path | None = None) -> dict[str, Path]:
    """Write the summary files of `root` into `out_dir` (default: root); returns them."""
    root = Path(root)
    if not root.exists():
        raise UserError(
            f"Cannot summarize {root}: it does not exist. Give a run folder "
            "(outputs/DATE/TIME) or a multirun folder (multirun/DATE/TIME)."
        )
    if not root.is_dir():
        raise UserError(
            f"Cannot summarize {root}: it is not a folder. Give a run folder "
            "(outputs/DATE/TIME) or a multirun folder (multirun/DATE/TIME)."
        )
    folders = RunFolder.jobs_under(root)
    if not folders:
        raise UserError(
            f"Cannot summarize {root}: no piexp run was found in it (a run folder holds "
            ".hydra/config.yaml). Give a run folder (outputs/DATE/TIME) or a multirun "
            "folder (multirun/DATE/TIME)."
        )
    out_dir = Path(out_dir) if out_dir is not None else root
    out_dir.mkdir(parents=True, exist_ok=True)
    states = sweep_states(root)
    jobs = [summarize_job(folder, root, states) for folder in folders]
    header, rows = table_rows(jobs)
    written = {"csv": out_dir / f"{OUTPUT_STEM}.csv", "md": out_dir / f"{OUTPUT_STEM}.md"}
    write_csv(written["csv"], header, rows)
    written["md"].write_text(
        markdown(root, header, rows, training=trained(jobs))
        + cells_markdown(jobs)
        + states_markdown(jobs)
        + seed_groups_markdown(jobs)
        + controls_markdown(jobs),
        encoding="utf-8",
    )
    for metric in KEY_METRICS:
        path = out_dir / f"{OUTPUT_STEM}_{metric}.png"
        if plot_metric(metric, jobs, path):
            written[metric] = path
        path = out_dir / f"{OUTPUT_STEM}_{metric}_over_seeds.png"
        if plot_seed_means(metric, jobs, path):
            written[f"{metric}_over_seeds"] = path
    if plot_cells(jobs, out_dir / f"{OUTPUT_STEM}_cells.png"):
        written["cells"] = out_dir / f"{OUTPUT_STEM}_cells.png"
    if plot_controls(jobs, out_dir / f"{OUTPUT_STEM}_controls.png"):
        written["controls"] = out_dir / f"{OUTPUT_STEM}_controls.png"
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
