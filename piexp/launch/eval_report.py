"""How an eval's results read for a person: `results.md` (pass@k, reward steps and
failing tasks per family x language, with what each column means), the heatmaps of
pass@1 and shaped reward `results.png` and the table printed at the end of `mode=eval`. The numbers themselves are
computed in `piexp.launch.evaluate`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from piexp.env.reward import REWARD_METRICS
from piexp.run_folder import harness_label
from piexp.transcripts.failures import failure_markdown


# What each column of results.md means (the reward's own definitions: env/reward.py).
METRIC_MEANINGS = {
    "pass@j": "share of tasks solved by at least one of j samples (unbiased estimator over the k samples)",
    "binary": "mean binary reward: 1 only when the episode wrote or edited a file, ran a program that printed "
    "the right answer, and stated it",
    "shaped": "mean shaped reward: weighted partial credit for those four steps (reward.weights), 1 when all hold",
    "tool_called": "share of episodes with at least one tool call",
    "mutation_succeeded": "share with a successful write or edit",
    "execution_succeeded": "share with a bash command that ran (status ok)",
    "execution_output_correct": "share where a program's output contained the answer",
    "response_answer_correct": "share whose final message's last integer is the answer",
    "functional_correct": "share with all four of the above (the binary reward)",
    "infrastructure_error": "share where the sandbox itself failed (not the program's fault)",
}
_MAX_PASS_COLUMNS = 6  # beyond this many pass@j columns, show j = 1, 2, 4, 8, ... and k


def _pass_columns(k: int) -> list[int]:
    """The j of pass@j shown in tables: all of 1..k, or powers of two and k when k is large."""
    if k <= _MAX_PASS_COLUMNS:
        return list(range(1, k + 1))
    shown = [j for j in (1 << n for n in range(k.bit_length())) if j < k]
    return [*shown, k]


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table's lines: the header, its rule, a line per row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _failing_tasks(results: dict[str, Any]) -> list[str]:
    """Per cell, the tasks no sample solved and those only some solved."""
    lines = ["## Failing tasks", ""]
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in results["per_task"]:
        if row["correct"] < row["n"]:
            cells[(row.get("family", "?"), row["language"])].append(row)
    if not cells:
        return lines + ["Every sample of every task was solved.", ""]
    for (family, language), rows in sorted(cells.items()):
        never = [r["task_id"] for r in rows if r["correct"] == 0]
        some = [f"{r['task_id']} ({r['correct']}/{r['n']})" for r in rows if r["correct"] > 0]
        lines.append(
            f"- **{family} x {language}**: "
            + "; ".join(
                filter(
                    None,
                    [
                        f"never solved: {', '.join(never)}" if never else "",
                        f"solved by some samples: {', '.join(some)}" if some else "",
                    ],
                )
            )
        )
    return lines + ["", "`python -m piexp show RUN --failed --task TASK_ID` prints such an episode's conversation.", ""]


def incomplete_note(results: dict[str, Any]) -> str | None:
    """The line that labels results lacking episodes the run could not play ("INCOMPLETE:
    ..."), or None when every one was played; every place that shows results shows it."""
    missing = int(results.get("episodes_failed_to_run") or 0)
    if results.get("complete", True) and not missing:
        return None
    expected = results.get("episodes_expected", "?")
    return (
        f"INCOMPLETE: {missing} of {expected} episodes could not be run (piexp's sandbox or model service "
        "failed; none was scored); the same command resumes the run"
    )


def results_markdown(results: dict[str, Any]) -> str:
    k = results["k"]
    shown = _pass_columns(k)
    languages, cells = results["languages"], results["cells"]
    subject = results["policy"] + (
        f" ({results['checkpoint'] or results['model']})" if results["policy"] == "model" else ""
    )
    lines = [f"# Eval results: {subject}, harness {harness_label(results.get('harness'))}", ""]
    if (note := incomplete_note(results)) is not None:
        lines += [f"**{note}.**", ""]
    lines += [f"k = {k} samples per task; binary reward decides a pass.", ""]
    lines += ["## pass@1 by family x language", ""]
    lines += _table(
        ["family", *languages],
        ([family, *(f"{row[lang]['pass@1']:.3f}" for lang in languages)] for family, row in cells.items()),
    )
    overall = results["overall"]
    lines.append("")
    lines.append(
        "Overall: "
        + ", ".join(f"pass@{j} {overall[f'pass@{j}']:.3f}" for j in shown)
        + f", shaped reward {overall['reward_shaped']:.3f} over {overall['episodes']} episodes."
    )
    per_cell = [(family, language, row[language]) for family, row in cells.items() for language in languages]
    lines += ["", "## Per cell: outcomes", ""]
    lines += _table(
        [
            "family",
            "language",
            "tasks",
            "episodes",
            "not run",
            *(f"pass@{j}" for j in shown),
            "binary",
            "shaped",
            "stop reasons",
        ],
        (
            [
                family,
                language,
                str(cell["tasks"]),
                str(cell["episodes"]),
                str(cell.get("not_run", 0)),
                *(f"{cell[f'pass@{j}']:.3f}" for j in shown),
                f"{cell['reward_binary']:.3f}",
                f"{cell['reward_shaped']:.3f}",
                ", ".join(f"{name} {count}" for name, count in cell["stop_reasons"].items()),
            ]
            for family, language, cell in per_cell
        ),
    )
    lines += ["", "## Per cell: reward steps", ""]
    lines += _table(
        ["family", "language", *REWARD_METRICS],
        (
            [family, language, *(f"{cell['metrics'][name]:.3f}" for name in REWARD_METRICS)]
            for family, language, cell in per_cell
        ),
    )
    lines += ["", *_failing_tasks(results)]
    lines += ["## What the columns mean", ""]
    lines += [f"- `{name}`: {meaning}" for name, meaning in METRIC_MEANINGS.items()]
    lines += [
        "",
        failure_markdown(
            results["overall"]["tool_failures"],
            {
                family: {language: cell["tool_failures"] for language, cell in row.items()}
                for family, row in cells.items()
            },
        ),
    ]
    return "\n".join(lines)


# The panels of results.png: (results.json cell key, title). pass@1 alone made `wrong`
# (shaped 0.30), `crash` (0.15) and `guess` (0) look the same; shaped reward tells them apart.
HEATMAP_PANELS = (("pass@1", "pass@1"), ("reward_shaped", "mean shaped reward"))


def plot_heatmap(results: dict[str, Any], path: Path) -> None:
    """pass@1 and mean shaped reward by family (rows) x language (columns), side by side,
    values written in the cells; what it shows is also in the PNG's Description."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families, languages = list(results["cells"]), results["languages"]
    width = 1.6 + 1.3 * len(languages)
    figure, panels = plt.subplots(
        1, len(HEATMAP_PANELS), figsize=(2 * width, 1.0 + 0.45 * len(families)), squeeze=False
    )
    for axes, (key, title) in zip(panels[0], HEATMAP_PANELS):
        values = [[results["cells"][f][lang][key] for lang in languages] for f in families]
        image = axes.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        axes.set_xticks(range(len(languages)), labels=languages)
        axes.set_yticks(range(len(families)), labels=families)
        for row, family_values in enumerate(values):
            for column, value in enumerate(family_values):
                axes.text(
                    column,
                    row,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    color="black" if value > 0.6 else "white",
                    fontsize=9,
                )
        axes.set_title(f"{title}: {results['policy']}" + (" (INCOMPLETE)" if incomplete_note(results) else ""))
        figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    figure.tight_layout()
    described = " and ".join(title for _, title in HEATMAP_PANELS)
    figure.savefig(path, dpi=120, metadata={"Description": f"{described} by family x language"})
    plt.close(figure)


def summary_table(results: dict[str, Any]) -> Table:
    languages = results["languages"]
    table = Table(
        title=f"pass@1 ({results['policy']}, k={results['k']}, harness {harness_label(results.get('harness'))})",
        caption=f"overall pass@1 {results['overall']['pass@1']:.3f} over {results['overall']['episodes']} episodes"
        + (f"\n[red]{note}[/red]" if (note := incomplete_note(results)) else ""),
    )
    table.add_column("family")
    for language in languages:
        table.add_column(language, justify="right")
    for family, row in results["cells"].items():
        table.add_row(family, *(f"{row[lang]['pass@1']:.3f}" for lang in languages))
    return table
