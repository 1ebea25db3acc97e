"""The plots of `piexp summarize`: each key metric per job (training curves, or bars of
eval values), the mean over seeds per setting with its 95% interval, and pass@1 per
family x language as a heatmap, and the online controls of train runs over steps
(informative-group fraction, pool sizes, levels). Each returns False and writes nothing when no job has
what it shows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from piexp.commands.job_summary import JobSummary, finished_values, seed_groups, varying_overrides
from piexp.stats import mean_ci95

_MAX_UPRIGHT_BARS = 8  # beyond this many eval runs the bar plot turns horizontal


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
        axes.set_xticks(
            positions,
            labels,
            rotation=30 if len(bars) > 3 else 0,
            ha="right" if len(bars) > 3 else "center",
            fontsize="small",
        )
        axes.set_title(f"{metric} per run")
        if metric == "pass@1":
            axes.set_ylim(0, 1.05)
    if not bars or curves or len(bars) <= _MAX_UPRIGHT_BARS:
        axes.set_ylabel(metric)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def plot_seed_means(metric: str, jobs: Sequence[JobSummary], path: Path) -> bool:
    """One bar per setting run with several seeds: the mean over its finished seeds with
    a 95% confidence interval; False (nothing written) when no setting has two seeds."""
    groups = {
        setting: values
        for setting, members in seed_groups(jobs).items()
        if len(values := finished_values(members, metric)) >= 2
    }
    if not groups:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = {setting: mean_ci95(values) for setting, values in groups.items()}
    figure, axes = plt.subplots(figsize=(8, 1.0 + 0.4 * len(stats)))
    positions = list(range(len(stats)))[::-1]
    axes.barh(
        positions,
        [mean for mean, _ in stats.values()],
        xerr=[half or 0.0 for _, half in stats.values()],
        color="tab:blue",
        capsize=4,
    )
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
    axes.set_yticks(
        range(len(rows)),
        [_label(job, varying) for job, varying in zip(rows, varying_overrides(rows))],
        fontsize="small",
    )
    for r, row in enumerate(values):
        for c, value in enumerate(row):
            if value == value:  # not nan
                axes.text(
                    c,
                    r,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize="x-small",
                    color="black" if value > 0.6 else "white",
                )
    axes.set_title("pass@1 by family x language")
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


# The panels of the controls plot: a title and which `controls/` metrics it draws.
_CONTROL_PANELS = (
    ("informative groups (fraction)", ("controls/informative_fraction",)),
    ("groups dropped by the binary gate", ("controls/gate_dropped",)),
    ("pool sizes", ("controls/pool/",)),
    ("difficulty level per family", ("controls/level/",)),
)


def plot_controls(jobs: Sequence[JobSummary], path: Path) -> bool:
    """The online controls of each train job over steps, a panel per kind that some job
    has; returns False (and writes nothing) when no job recorded any."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        (title, keys)
        for title, prefixes in _CONTROL_PANELS
        if (keys := sorted({k for job in jobs for row in job.controls for k in row if k.startswith(prefixes)}))
    ]
    if not panels:
        return False
    figure, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), squeeze=False)
    for (title, keys), axis in zip(panels, axes[:, 0]):
        for job in jobs:
            for key in keys:
                points = [(row["step"], row[key]) for row in job.controls if key in row]
                if points:
                    steps, values = zip(*points)
                    label = job.name if len(keys) == 1 else f"{job.name} {key.rsplit('/', 1)[-1]}"
                    axis.plot(steps, values, marker="." if len(steps) < 30 else None, label=label)
        axis.set_title(title)
        axis.set_xlabel("step")
        axis.legend(fontsize="small", loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True
