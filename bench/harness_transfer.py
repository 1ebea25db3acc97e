"""Is training in the harness worth it, or is a look-alike enough? One base model
(`model=learner-local-pi`, pre-trained on episodes of both harnesses), RL in the
reference environment and RL in the real Pi with the same budget and seed
(`experiment=learn_offline`), and each of the three models (base, RL in builtin, RL in
Pi) evaluated in both harnesses on the same held-out eval tasks. Offline, on a CPU.

Usage: `python bench/harness_transfer.py [OUT_DIR] [--seeds=0,1,...] [--with=OVERRIDE ...]`
(`--with` adds an override to both RL runs; a temporary folder by default). OUT_DIR keeps
every run folder (`rl_builtin/`, `rl_pi/` with their base and trained evaluations, and
the two cross evaluations `rl_builtin_in_pi/`, `rl_pi_in_builtin/`), and gets
`transfer.md`, `transfer.json` and `transfer.png`: the table and its plot.

How to read it. Per seed: pass@1 of each model in each harness, its paired difference
to the base model in that harness with the 95% t-interval over tasks
(piexp.launch.comparison), and RL in Pi minus RL in builtin, both evaluated in Pi, paired
over the same tasks: beyond its interval, training in the harness beat training in the
look-alike there. The time of each stage is in the records
(bench/results/harness_transfer.jsonl).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from learning import HARNESSES as OVERRIDES
from learning import build_model, run_piexp
from record import RecordingConsole, record, table_data
from rich.console import Console
from rich.table import Table

MODEL = "learner-local-pi"
HARNESSES = ("builtin", "pi")
LOOP = ["experiment=learn_offline", f"model={MODEL}"]
# An evaluation of a training run's final checkpoint, as the loop's trained evaluation runs it.
CROSS_EVAL = ["experiment=learn_offline", f"model={MODEL}", "mode=eval", "policy=model", "mode.preflight=false"]


def in_harness(name: str) -> list[str]:
    """The overrides that play a run in harness `name` (bench/learning.py's, its model aside)."""
    return [f"harness={name}", *(o for o in OVERRIDES[name][0] if not o.startswith(("model=", "harness=")))]


def transfer(out: Path, console: Console, seed: int, extra: tuple[str, ...]) -> dict:
    """The runs of one seed into `out`, and the table's figures."""
    from piexp.launch.comparison import compare, load_run
    from piexp.launch.loop import BASE_EVAL_DIR, TRAINED_EVAL_DIR

    began = time.perf_counter()
    console.print(f"pre-training {MODEL} (cached after the first build) ...")
    path, marker, build_s, cached = build_model(MODEL)
    console.print(f"model {path} ({'cached' if cached else f'built in {build_s:.0f} s'})")
    seconds: dict[str, float] = {}
    for harness in HARNESSES:
        console.print(f"RL in {harness}, with evaluations before and after ...")
        seconds[f"rl_{harness}"], _ = run_piexp(
            [*LOOP, *in_harness(harness), *extra, f"seed={seed}"], out / f"rl_{harness}", out / f"rl_{harness}.log"
        )
    for trained, evaluated in (("builtin", "pi"), ("pi", "builtin")):
        name = f"rl_{trained}_in_{evaluated}"
        console.print(f"the model trained in {trained}, evaluated in {evaluated} ...")
        seconds[name], _ = run_piexp(
            [*CROSS_EVAL, *in_harness(evaluated), f"checkpoint={out / f'rl_{trained}'}", f"seed={seed}"],
            out / name,
            out / f"{name}.log",
        )
    runs = {
        ("base", "builtin"): out / "rl_builtin" / BASE_EVAL_DIR,
        ("base", "pi"): out / "rl_pi" / BASE_EVAL_DIR,
        ("rl_builtin", "builtin"): out / "rl_builtin" / TRAINED_EVAL_DIR,
        ("rl_builtin", "pi"): out / "rl_builtin_in_pi",
        ("rl_pi", "builtin"): out / "rl_pi_in_builtin",
        ("rl_pi", "pi"): out / "rl_pi" / TRAINED_EVAL_DIR,
    }
    cells: dict[str, dict[str, dict]] = {}
    for harness in HARNESSES:
        loaded = [load_run(runs[(model, harness)]) for model in ("base", "rl_builtin", "rl_pi")]
        result = compare(loaded)["overall"]
        for model, row in zip(("base", "rl_builtin", "rl_pi"), result["runs"], strict=True):
            cells.setdefault(model, {})[harness] = row
        tasks = result["tasks"]
    in_pi = compare([load_run(runs[("rl_builtin", "pi")]), load_run(runs[("rl_pi", "pi")])])["overall"]["runs"][1]
    return {
        "seed": seed,
        "model": str(path),
        "tasks": tasks,
        "cells": cells,
        "pi_minus_builtin_in_pi": {"diff": in_pi["diff_pass@1"], "ci": in_pi["diff_pass@1_ci"]},
        "build_s": marker.get("rollout_s", 0) + marker.get("fit_s", 0) if cached else build_s,
        "seconds": seconds,
        "total_s": time.perf_counter() - began,
    }


LABELS = {"base": "base (learner-local-pi)", "rl_builtin": "after RL in builtin", "rl_pi": "after RL in Pi"}


def table(figures: dict, console: Console) -> None:
    shown = Table(
        title=f"seed {figures['seed']}: pass@1 on {figures['tasks']} held-out eval tasks, each model evaluated in "
        "each harness (diff: paired difference to the base model in that harness, 95% t-interval over tasks)"
    )
    shown.add_column("model")
    for harness in HARNESSES:
        shown.add_column(f"pass@1 in {harness}", justify="right")
        shown.add_column(f"diff in {harness}", justify="right")
    for model, label in LABELS.items():
        row = [label]
        for harness in HARNESSES:
            cell = figures["cells"][model][harness]
            row.append(f"{cell['pass@1']:.3f}")
            row.append(f"{cell['diff_pass@1']:+.3f} ± {cell['diff_pass@1_ci']:.3f}" if "diff_pass@1" in cell else "")
        shown.add_row(*row)
    console.print(shown)
    versus = figures["pi_minus_builtin_in_pi"]
    beyond = versus["diff"] - versus["ci"] > 0
    console.print(
        f"seed {figures['seed']}: in Pi, RL in Pi minus RL in builtin: {versus['diff']:+.3f} ± {versus['ci']:.3f} "
        f"pass@1, paired over tasks; beyond its interval: {'yes' if beyond else 'no'}"
    )
    console.print(
        "seconds: "
        + ", ".join(f"{name} {value:.0f}" for name, value in figures["seconds"].items())
        + f"; whole seed {figures['total_s']:.0f} (build {figures['build_s']:.0f}, "
        "recorded at its build when cached)"
    )


def write(out: Path, runs: list[dict], console: RecordingConsole) -> None:
    """transfer.json, transfer.md (the tables printed) and transfer.png (pass@1 per model
    and harness, with each seed's 95% interval of the difference to the base)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "transfer.json").write_text(json.dumps(runs, indent=2) + "\n")
    lines = ["# Harness transfer: pass@1 of each model in each harness", ""]
    for shown in map(table_data, console.tables):
        lines += [f"**{shown['title']}**", "", "| " + " | ".join(shown["columns"]) + " |"]
        lines += ["|" + "---|" * len(shown["columns"])]
        lines += ["| " + " | ".join(row) + " |" for row in shown["rows"]] + [""]
    lines += [line for line in console.lines if line.startswith("seed ")]
    (out / "transfer.md").write_text("\n".join(lines) + "\n")
    figure, axes = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(LABELS)
    for index, (model, label) in enumerate(LABELS.items()):
        for run in runs:
            xs = [h + (index - 1) * width for h in range(len(HARNESSES))]
            heights = [run["cells"][model][harness]["pass@1"] for harness in HARNESSES]
            errors = [run["cells"][model][harness].get("diff_pass@1_ci", 0.0) for harness in HARNESSES]
            axes.bar(xs, heights, width, yerr=errors, capsize=3, label=label if run is runs[0] else None,
                     color=f"C{index}", alpha=0.9 / len(runs) + 0.1)  # fmt: skip
    axes.set_xticks(range(len(HARNESSES)), [f"evaluated in {h}" for h in HARNESSES])
    axes.set_ylabel("pass@1 (error bar: 95% interval of the diff to base)")
    axes.set_title(f"{MODEL}: RL in each harness, evaluated in both ({len(runs)} seed(s))")
    axes.legend()
    figure.tight_layout()
    figure.savefig(out / "transfer.png", dpi=120)
    plt.close(figure)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith(("--seeds=", "--with="))]
    extra = tuple(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--with="))
    seeds = [int(s) for s in next((a[8:] for a in sys.argv[1:] if a.startswith("--seeds=")), "0").split(",")]
    console = RecordingConsole()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args[0]) if args else Path(tmp)
        for seed in seeds:
            folder = out / f"seed_{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            figures = transfer(folder, console, seed, extra)
            table(figures, console)
            runs.append(figures)
        write(out, runs, console)
        console.print(f"wrote {out / 'transfer.md'}, transfer.json, transfer.png")
    record(__file__, console.tables, console.lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
