"""Where is `model=learner-local`'s frontier, do the online controls keep its training
groups informative, and what do they do to the held-out result? One command, offline, on
a CPU, every arm measured in the same run:

1. `python -m piexp calibrate experiment=learn_offline policy=model` on the base model
   (the preset's two families at each of their five difficulty levels): pass@1 per level
   with its 95% interval, the levels it proposes and the preset it writes;
2. `experiment=learn_offline` trained four ways from the same base model, seed and tasks:
   no control (its loop also evaluates the base model), `algo.binary_gate=true` (a group
   whose binary outcomes are all equal is dropped, whatever its shaped rewards),
   `tasks.pools.enabled=true` (difficulty pools) and `tasks.adaptive.enabled=true`
   (each family's level moves to keep its rolling pass rate in the band); each trained
   checkpoint is evaluated on the same held-out eval tasks;
3. the calibration again, on the no-control arm's trained checkpoint: where the frontier
   moved.

It prints, per training step and arm, the fraction of sampled groups whose binary outcomes
differ (`controls/informative_fraction`: the groups RL can learn from), the groups the gate
dropped, the pool sizes and the levels; per arm, the mean informative fraction, the groups
it trained on of those it sampled, with how many of them were informative (the gate trains
on informative groups only) and held-out pass@1 with its paired difference (95% t-interval over tasks) to the
base model and to the no-control arm. Usage: `python bench/training_controls.py [OUT_DIR]
[--seed=S] [--arms=none,binary_gate,pools,adaptive] [--with=OVERRIDE ...] [--no-calibrate]`
(`--with` adds an override to every arm's training, e.g. fewer train tasks; a temporary folder
by default; the run folders stay in OUT_DIR for `piexp show` / `summarize`; run again on
the same OUT_DIR, it keeps the arms and calibrations finished there and reports again).

How to read it: each arm is one run, so a difference between arms holds only beyond its
interval (runs of one seed spread: bench/learning.py). A control that drops groups (the
binary gate) can lose the shaped-reward signal of a model below its frontier, whose early
groups fail every episode; difficulty pools need train groups drawn more than once to
move; adaptive difficulty needs a family whose declared levels bracket the model's
training distribution, and the calibration tables show whether any level is in the band.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from learning import build_model, run_piexp
from record import RecordingConsole, record
from rich.console import Console
from rich.table import Table

PRESET = ["experiment=learn_offline"]
#: The arms: what each adds to the preset. `none` runs the preset's loop (base eval first).
ARMS: dict[str, list[str]] = {
    "none": [],
    "binary_gate": ["algo.binary_gate=true"],
    "pools": ["tasks.pools.enabled=true"],
    "adaptive": ["tasks.adaptive.enabled=true"],
}
#: Calibration grid: tasks per level and samples per task (2 families x 5 levels: 160 episodes).
CALIBRATION = ["n=8", "k=2"]


def calibrate(out: Path, log: Path, *extra: str) -> tuple[dict, float]:
    """`piexp calibrate` of learner-local on the preset's families into `out`: its
    calibration.json and the wall seconds."""
    started = time.perf_counter()
    with open(log, "w") as sink:
        result = subprocess.run(
            [sys.executable, "-m", "piexp", "calibrate", *PRESET, "policy=model", *CALIBRATION, *extra, "--out", str(out)],
            stdout=sink, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"calibrate failed (exit {result.returncode}); see {log}")
    return json.loads((out / "calibration.json").read_text()), time.perf_counter() - started


def calibration_table(data: dict, title: str, console: Console) -> None:
    table = Table(title=title)
    for column in ("family", "language", "level", "params", "pass@1", "mean shaped reward"):
        table.add_column(column, justify="left" if column in ("family", "language", "params") else "right")
    for cell in data["cells"]:
        table.add_row(
            cell["family"],
            cell["language"],
            str(cell["level"]),
            " ".join(f"{key}={value}" for key, value in cell["params"].items()),
            f"{cell['pass@1']:.3f} ± {cell['pass@1_ci95']:.3f}",
            f"{cell['reward_shaped']:.3f} ± {cell['reward_shaped_ci95']:.3f}",
        )
    console.print(table)
    for family, proposal in data["proposal"].items():
        chosen = proposal["chosen"]
        console.print(f"  {family}: " + (f"proposed level {chosen}" if chosen is not None else "no level in the band"))
    if data.get("preset"):
        console.print(f"  preset written: {data['preset']}")


def step_controls(run_dir: Path) -> list[dict[str, float]]:
    """Each training step's `controls/...` metrics (prefix dropped), in step order."""
    from piexp.run_folder import RunFolder
    from piexp.run_records import CONTROLS_PREFIX, control_rows

    return [
        {key.removeprefix(CONTROLS_PREFIX): value for key, value in row.items()}
        for row in control_rows(RunFolder(run_dir).metrics())
    ]


def trained_groups(run_dir: Path, gate: bool) -> tuple[int, int, int]:
    """(groups sampled, groups trained on, informative groups trained on): every sampled
    group is trained on, except that the gate drops those whose binary outcomes are equal."""
    from piexp.env.group_outcomes import OUTCOMES_FILE, GroupOutcome
    from piexp.files import read_jsonl

    outcomes = [GroupOutcome.from_json(line) for line in read_jsonl(run_dir / OUTCOMES_FILE)]
    trained = [o for o in outcomes if o.informative] if gate else outcomes
    return len(outcomes), len(trained), sum(o.informative for o in trained)


def run_arms(out: Path, arms: list[str], seed: int, common: list[str], console: Console) -> dict:
    from piexp.launch.comparison import compare, load_run
    from piexp.launch.loop import BASE_EVAL_DIR, TRAINED_EVAL_DIR

    figures: dict = {"arms": {}}
    for arm in arms:
        timing = out / arm / "bench_timing.json"  # an arm finished by an earlier run of the bench is kept
        if not timing.is_file():
            console.print(f"training arm {arm} ...")
            extra = ARMS[arm] if arm == "none" else [*ARMS[arm], "mode.eval_before=false"]
            command = [*PRESET, *common, *extra, f"seed={seed}"]
            seconds, peak_mb = run_piexp(command, out / arm, out / f"{arm}.log")
            timing.write_text(json.dumps({"seconds": seconds, "peak_mb": peak_mb}))
        figures["arms"][arm] = {
            **json.loads(timing.read_text()),
            "steps": step_controls(out / arm),
            "groups": trained_groups(out / arm, gate=arm == "binary_gate"),
        }
    base = load_run(out / "none" / BASE_EVAL_DIR)
    trained = {arm: load_run(out / arm / TRAINED_EVAL_DIR) for arm in arms}
    against_base = compare([base, *trained.values()])
    figures["tasks"] = against_base["overall"]["tasks"]
    figures["base"] = against_base["overall"]["runs"][0]
    for arm, row in zip(arms, against_base["overall"]["runs"][1:]):
        figures["arms"][arm]["heldout"] = row
        if arm != "none":
            figures["arms"][arm]["versus_none"] = compare([trained["none"], trained[arm]])["overall"]["runs"][1]
    return figures


def _cell(value: float | None, form: str = ".2f") -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, form)


def report(figures: dict, console: Console) -> None:
    arms = list(figures["arms"])
    steps = Table(title="per training step: fraction of sampled groups whose binary outcomes differ (informative)")
    steps.add_column("step", justify="right")
    for arm in arms:
        steps.add_column(arm, justify="right")
    steps.add_column("gate dropped", justify="right")
    steps.add_column("pools easy/normal/hard", justify="right")
    steps.add_column("levels", justify="right")
    for step in range(max(len(figures["arms"][arm]["steps"]) for arm in arms)):
        row = {
            arm: figures["arms"][arm]["steps"][step] if step < len(figures["arms"][arm]["steps"]) else {}
            for arm in arms
        }
        gate = row.get("binary_gate", {}).get("gate_dropped")
        pools = row.get("pools", {})
        pool_text = (
            "/".join(_cell(pools.get(f"pool/{name}"), ".0f") for name in ("easy", "normal", "hard")) if pools else ""
        )
        levels = " ".join(
            f"{key.removeprefix('level/')}={value:.0f}"
            for key, value in row.get("adaptive", {}).items()
            if key.startswith("level/")
        )
        steps.add_row(
            str(step),
            *(_cell(row[arm].get("informative_fraction")) for arm in arms),
            _cell(gate, ".0f"),
            pool_text,
            levels,
        )
    console.print(steps)

    table = Table(
        title=f"per arm, {figures['tasks']} held-out eval tasks (base pass@1 {figures['base']['pass@1']:.3f}; "
        "diffs paired over tasks, 95% t-intervals)"
    )
    for column in (
        "arm",
        "informative (sampled)",
        "groups trained on (informative)",
        "pass@1 after",
        "vs base",
        "vs none",
        "run s",
    ):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for arm, data in figures["arms"].items():
        fractions = [row["informative_fraction"] for row in data["steps"] if "informative_fraction" in row]
        held = data["heldout"]
        versus = data.get("versus_none")
        table.add_row(
            arm,
            _cell(sum(fractions) / len(fractions) if fractions else math.nan),
            "{1} of {0} ({2})".format(*data["groups"]),
            f"{held['pass@1']:.3f}",
            f"{held['diff_pass@1']:+.3f} ± {held['diff_pass@1_ci']:.3f}",
            f"{versus['diff_pass@1']:+.3f} ± {versus['diff_pass@1_ci']:.3f}" if versus else "",
            f"{data['seconds']:.0f}",
        )
    console.print(table)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    common = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--with=")]  # every arm's overrides
    flags = [a for a in sys.argv[1:] if a.startswith("--") and not a.startswith("--with=")]
    options: dict[str, str] = {}
    for flag in flags:
        name, _, value = flag[2:].partition("=")
        options[name] = value
    unknown = set(options) - {"seed", "arms", "no-calibrate"}
    if unknown:
        raise SystemExit(f"unknown option(s) {sorted(unknown)}; usage: see this file's docstring")
    arms = options.get("arms", ",".join(ARMS)).split(",")
    if "none" not in arms or set(arms) - set(ARMS):
        raise SystemExit(f"--arms must list arms of {list(ARMS)} and include none (the baseline), got {arms}")
    seed = int(options.get("seed", "0"))
    out = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="piexp-bench-controls-"))
    out.mkdir(parents=True, exist_ok=True)
    console = RecordingConsole()
    began = time.perf_counter()
    path, marker, build_s, cached = build_model()
    console.print(f"learner-local {path} ({'cached' if cached else f'built in {build_s:.0f} s'})")
    calibrations = {}
    if "no-calibrate" not in options:
        console.print("calibrating the base model ...")
        calibrations["base"] = calibrate(out / "calibration_base", out / "calibration_base.log", f"seed={seed}")
    figures = run_arms(out, arms, seed, common, console)
    if "no-calibrate" not in options:
        console.print("calibrating the no-control arm's trained checkpoint ...")
        calibrations["trained"] = calibrate(
            out / "calibration_trained", out / "calibration_trained.log", f"seed={seed}", f"checkpoint={out / 'none'}"
        )
    for name, (data, seconds) in calibrations.items():
        calibration_table(data, f"calibration of the {name} model ({seconds:.0f} s)", console)
    report(figures, console)
    (out / "bench_training_controls.json").write_text(
        json.dumps({"figures": figures, **{k: v[0] for k, v in calibrations.items()}}, indent=1, default=str)
    )
    console.print(f"whole bench {time.perf_counter() - began:.0f} s; run folders in {out}")
    record(__file__, console.tables, console.lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
