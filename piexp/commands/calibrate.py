"""`python -m piexp calibrate [overrides] [levels=1-5] [n=N] [band=0.2-0.8] [budget=E] [--yes]
[--out DIR]`: evaluate a policy (scripted, or `policy=model` with `model=` / `checkpoint=`)
on every selected family x language at each of the family's difficulty levels, and write
the calibration table, plot and a preset of the levels at the policy's frontier. Every
check (levels, band, tasks, the budget) happens before anything is written; the same
command on the same `--out` resumes."""

from __future__ import annotations

from piexp.run_folder import RunFolder

from collections.abc import Sequence
from pathlib import Path

from piexp.errors import UserError

USAGE = (
    "usage: python -m piexp calibrate [--config-dir DIR] [family=...] [lang=...] [policy=oracle|wrong|...|model] "
    "[model=... | checkpoint=...] [levels=1-5] [n=TASKS per level, default 10] [k=SAMPLES per task, default 4] "
    "[band=LOW-HIGH, default 0.2-0.8] [budget=EPISODES, default 2000] [--yes: run a grid above the budget] "
    "[--out DIR or hydra.run.dir=DIR, default calibration/POLICY] [other overrides]"
)
# Episodes a calibration may sample without --yes.
DEFAULT_BUDGET = 2000
# Eval tasks per level (per family and language): the interval is over tasks.
DEFAULT_TASKS = 10
# Samples per task when the command line sets no k.
DEFAULT_SAMPLES = 4
# Default target band for pass@1: levels where a group of samples is likely to differ.
DEFAULT_BAND = (0.2, 0.8)


def _take(args: list[str], key: str) -> str | None:
    for arg in list(args):
        if arg.startswith(f"{key}="):
            args.remove(arg)
            return arg.split("=", 1)[1]
    return None


def _take_flag(args: list[str], flag: str) -> str | None:
    """`--out DIR` or `--out=DIR`."""
    for index, arg in enumerate(args):
        if arg == flag:
            if index + 1 >= len(args):
                raise UserError(f"{flag} needs a value. {USAGE}")
            value = args[index + 1]
            del args[index : index + 2]
            return value
        if arg.startswith(f"{flag}="):
            del args[index]
            return arg.split("=", 1)[1]
    return None


def parse_band(text: str | None) -> tuple[float, float]:
    if text is None:
        return DEFAULT_BAND
    try:
        low, high = (float(part) for part in text.split("-", 1))
    except ValueError:
        raise UserError(f"band={text!r} is not a pass@1 band like 0.2-0.8. {USAGE}") from None
    if not (0.0 <= low <= 1.0 and 0.0 <= high <= 1.0) or low >= high:
        raise UserError(
            f"band={text!r}: the band needs 0 <= low < high <= 1 (pass@1 is a fraction), e.g. band=0.2-0.8."
        )
    return low, high


def _positive(text: str | None, key: str, default: int, least: int = 1) -> int:
    if text is None:
        return default
    if not text.isdigit() or int(text) < least:
        raise UserError(f"{key} must be an integer >= {least}, got {text!r}. {USAGE}")
    return int(text)


def _output_folder(out: str | None, run_dir: str | None, sweep_dir: str | None) -> str | None:
    """The folder a calibration writes: `--out DIR`, or `hydra.run.dir=DIR` as a run's
    command line names its folder (the two, when both are given, must agree); None for
    the default. A sweep folder is not one: calibrate writes a single folder."""
    if sweep_dir is not None:
        raise UserError(
            f"hydra.sweep.dir={sweep_dir}: calibrate is not a sweep (it runs its levels itself, each into a "
            "folder of its own under one output folder); name that folder with --out DIR or hydra.run.dir=DIR."
        )
    if run_dir is None:
        return out
    if not run_dir.strip():
        raise UserError("hydra.run.dir is empty: give the folder calibrate writes, or drop it for calibration/POLICY.")
    if out is not None and Path(out).resolve() != Path(run_dir).resolve():
        raise UserError(
            f"--out {out} and hydra.run.dir={run_dir} name two different folders for the calibration; give one."
        )
    return run_dir


def main(argv: Sequence[str]) -> int:
    from piexp.config.argv import rewrite_list_overrides
    from piexp.config.compose import load
    from piexp.config.search_path import take_config_dir
    from piexp.config.suggest import did_you_mean
    from piexp.console import say
    from piexp.launch.calibrate import Level, declared_family, level_folder, run_levels, write_calibration
    from piexp.tasks.difficulty import parse_levels

    args = list(argv)
    if any(arg in ("-h", "--help") for arg in args):
        print(USAGE)
        return 0
    args = take_config_dir(args)
    confirmed = "--yes" in args
    args = [arg for arg in args if arg != "--yes"]
    out_text = _take_flag(args, "--out")
    for arg in args:
        if arg.startswith("-"):
            raise UserError(f"Unknown option {arg} for calibrate.{did_you_mean(arg, ['--out', '--yes'])} {USAGE}")
    out_text = _output_folder(out_text, _take(args, "hydra.run.dir"), _take(args, "hydra.sweep.dir"))
    levels_text = _take(args, "levels")
    tasks = _positive(_take(args, "n"), "n", DEFAULT_TASKS, least=2)  # an interval needs two tasks
    budget = _positive(_take(args, "budget"), "budget", DEFAULT_BUDGET)
    band = parse_band(_take(args, "band"))
    for arg in args:
        if arg.startswith(("mode=", "tasks.eval_per_family=")):
            raise UserError(f"{arg}: calibrate runs mode=eval with n=TASKS per level itself; drop it. {USAGE}")
    overrides = rewrite_list_overrides(args)
    if not any(arg.startswith("k=") for arg in overrides):
        overrides.append(f"k={DEFAULT_SAMPLES}")
    base = load([*overrides, "mode=eval", f"tasks.eval_per_family={tasks}"])
    # Each level: the user's overrides (of its family's params, only its own), then the level's params.
    levels: list[Level] = []
    out = Path(out_text or f"calibration/{base.eval_policy}").resolve()
    for name in base.families:
        family = declared_family(name)
        assert family.difficulty is not None
        fixed = [
            arg for arg in overrides if arg.split("=", 1)[0] in {f"family.{name}.{p}" for p in family.difficulty.harder}
        ]
        if fixed:
            raise UserError(
                f"{fixed[0]}: calibrate sets {name}'s difficulty parameters ({', '.join(family.difficulty.harder)}) "
                "from each level itself; drop it (other parameters of the family may be set)."
            )
        for number in parse_levels(name, family.difficulty.count, levels_text or "all"):
            params = family.level_params(number)
            level_overrides = (
                *[arg for arg in overrides if not arg.startswith("family") or arg.startswith(f"family.{name}.")],
                f"family=[{name}]",
                *[f"family.{name}.{key}={value}" for key, value in params.items()],
                "mode=eval",
                "mode.preflight=false",
                f"tasks.eval_per_family={tasks}",
            )
            config = load(list(level_overrides))
            levels.append(Level(name, number, params, config, level_folder(out, name, number), level_overrides))
    episodes = sum(level.episodes() for level in levels)
    grid = (
        f"{len(base.families)} famil{'y' if len(base.families) == 1 else 'ies'}, {len(levels)} levels in all, "
        f"{len(base.eval_languages)} language(s), {tasks} tasks x {base.samples_per_task} samples per level: "
        f"{episodes} episodes of policy {base.eval_policy}"
    )
    if episodes > budget and not confirmed:
        raise UserError(
            f"This calibration would sample {grid}, above its budget of {budget} episodes; nothing was run or "
            "written. Narrow it (levels=, family=, lang=, n=, k=), raise budget=E, or confirm with --yes."
        )
    say(f"calibrate: {grid} (budget {budget}); writing {out}")
    run_levels(levels, out)
    settings = {
        "policy": base.eval_policy,
        "model": base.model.name,
        "checkpoint": base.checkpoint,
        "seed": base.seed,
        "families": base.families,
        "languages": base.eval_languages,
        "tasks_per_level": tasks,
        "samples_per_task": base.samples_per_task,
        "band": list(band),
        "budget": budget,
    }
    data = write_calibration(out, levels, settings)
    for family, proposal in data["proposal"].items():
        chosen = proposal["chosen"]
        say(
            f"{family}: pass@1 by level {proposal['pass@1_by_level']}; "
            + (f"chosen level {chosen}" if chosen is not None else f"no level in band {band[0]:g}-{band[1]:g}")
        )
    say(
        f"wrote {out / RunFolder.CALIBRATION_JSON}, {RunFolder.CALIBRATION_MD}, {RunFolder.CALIBRATION_PNG}"
        + (
            f", {data['preset']} (copy it to experiments/NAME.yaml)"
            if data["preset"]
            else " (no preset: no level in band)"
        )
    )
    return 0
