"""`python -m piexp calibrate`: where a policy's frontier lies. For each selected family and
each of its declared difficulty levels (`piexp.tasks.difficulty`) it runs `mode=eval`'s
own code (`run_eval`, through the same policy, service and sandbox set-up, resumable by
its `episodes.jsonl`) on that level's eval tasks, each level in its folder
`levels/<family>/level-<L>/`; then it writes `calibration.json`, `calibration.md` and
`calibration.png` (pass@1 and mean shaped reward against level, with 95% t-intervals over
tasks, per family x language), and proposes per family the levels whose pass@1 (averaged
over languages) lies in the target band, with `calibrated.yaml`, a preset in
`experiments/` format that trains on the chosen level of each family that has one.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import contextlib
import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.config.schema import RunConfig
from piexp.console import say
from piexp.files import read_jsonl
from piexp.stats import mean_ci95
from piexp.errors import UserError
from piexp.tasks import Family, get_family

# The preset a calibration writes (copy it into experiments/ to select it by name).
PRESET_FILE = RunFolder.CALIBRATED_PRESET


@dataclass(frozen=True)
class Level:
    """One family at one difficulty level: its validated eval config and its folder."""

    family: str
    level: int
    params: dict[str, int]
    config: RunConfig
    folder: Path
    # The overrides `config` was composed from: recorded in the level's folder so that it
    # is a run folder (`show`, `rescore`, `replay`, `reproduce` recompose it from them).
    overrides: tuple[str, ...] = ()

    def episodes(self) -> int:
        return self.config.tasks.eval_per_family * len(self.config.eval_languages) * self.config.samples_per_task


def declared_family(name: str) -> Family:
    """The family `name`, refused unless it declares difficulty levels."""
    family = get_family(name)
    if not isinstance(family, Family) or family.difficulty is None:
        raise UserError(
            f"family {name} declares no difficulty levels, so calibrate cannot walk it: add "
            "difficulty=Difficulty(harder=..., levels=...) to its Family (docs/families.md), or leave it out of family=."
        )
    return family


def level_folder(out: Path, family: str, level: int) -> Path:
    return out / "levels" / family / f"level-{level}"


@contextlib.contextmanager
def _shared_sandbox(config: RunConfig) -> Iterator[RunConfig]:
    """One embedded sandbox for every level (each level's eval uses it as a remote one)."""
    sandbox = config.sandbox
    if sandbox.kind != "embedded":
        yield config
        return
    from piexp.launch.sandbox import run_sandbox

    with run_sandbox(sandbox) as url:
        yield config.model_copy(update={"sandbox": sandbox.as_remote(url)})


def run_levels(levels: Sequence[Level], out: Path) -> None:
    """Run (or resume) every level's eval; the service and the sandbox are set up once."""
    from piexp.cookbook_compat import check_installed_cookbook
    from piexp.launch.run import _run_mode, resolve_local_model
    from piexp.service import open_service

    check_installed_cookbook(training=False)  # evaluations only
    first = resolve_local_model(levels[0].config)
    service: contextlib.AbstractContextManager[RunConfig | None] = contextlib.nullcontext(None)
    if first.uses_service:
        service = open_service(first, out)
    with service as resolved, _shared_sandbox(first) as shared:
        for number, level in enumerate(levels, start=1):
            say(f"calibrate: {number}/{len(levels)}: {level.family} level {level.level} ({_params_text(level.params)})")
            update: dict[str, Any] = {"sandbox": shared.sandbox}
            if resolved is not None:
                update |= {"service": resolved.service, "model": resolved.model}
            record_level_config(level)
            _run_mode(level.config.model_copy(update=update), level.folder)


def record_level_config(level: Level) -> None:
    """`.hydra/config.yaml` and `.hydra/overrides.yaml` in the level's folder, as a run of
    its own writes them: the level's composed config and the overrides it came from."""
    import yaml

    (level.folder / RunFolder.RECORD_SUBDIR).mkdir(parents=True, exist_ok=True)
    (level.folder / RunFolder.CONFIG).write_text(yaml.safe_dump(level.config.model_dump(mode="json"), sort_keys=False))
    (level.folder / RunFolder.OVERRIDES).write_text(yaml.safe_dump(list(level.overrides)))


def _params_text(params: dict[str, int]) -> str:
    return ", ".join(f"{name}={value}" for name, value in params.items())


# Aggregation ----------------------------------------------------------------------------


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def level_cells(level: Level) -> list[dict[str, Any]]:
    """One cell per language of a level: pass@1 and mean shaped reward with their 95%
    intervals, each over the level's tasks (a task's value: the mean of its samples)."""
    path = level.folder / RunFolder.EPISODES
    by_task: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in read_jsonl(path) if path.exists() else []:
        if "error" in record and record["error"]:
            continue
        by_task[(str(record["language"]), str(record["task_id"]))].append(record)
    cells = []
    for language in level.config.eval_languages:
        tasks = [records for (lang, _), records in sorted(by_task.items()) if lang == language]
        passes = [sum(float(r["reward"]) == 1.0 for r in rs) / len(rs) for rs in tasks]
        shaped = [sum(float(r["shaped"]) for r in rs) / len(rs) for rs in tasks]
        pass1, pass_ci = mean_ci95(passes) if passes else (None, None)
        shaped_mean, shaped_ci = mean_ci95(shaped) if shaped else (None, None)
        cells.append(
            {
                "family": level.family,
                "language": language,
                "level": level.level,
                "params": level.params,
                "tasks": len(tasks),
                "episodes": sum(len(rs) for rs in tasks),
                "pass@1": _round(pass1),
                "pass@1_ci95": _round(pass_ci),
                "reward_shaped": _round(shaped_mean),
                "reward_shaped_ci95": _round(shaped_ci),
            }
        )
    return cells


def propose(cells: Sequence[dict[str, Any]], band: tuple[float, float]) -> dict[str, dict[str, Any]]:
    """Per family: pass@1 per level (the mean over its languages), the levels inside
    `band` (inclusive), and the chosen one: in band, nearest the band's middle."""
    low, high = band
    proposal: dict[str, dict[str, Any]] = {}
    by_family: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for cell in cells:
        if cell["pass@1"] is not None:
            by_family[cell["family"]][cell["level"]].append(cell["pass@1"])
    for family, levels in by_family.items():
        pass1 = {level: round(sum(values) / len(values), 4) for level, values in sorted(levels.items())}
        inside = [level for level, value in pass1.items() if low <= value <= high]
        middle = (low + high) / 2
        chosen = min(inside, key=lambda level: (abs(pass1[level] - middle), level)) if inside else None
        proposal[family] = {"pass@1_by_level": pass1, "levels_in_band": inside, "chosen": chosen}
    return proposal


def why_none(pass1: dict[int, float], band: tuple[float, float]) -> str:
    """One sentence on a family with no level in the band."""
    low, high = band
    if all(value > high for value in pass1.values()):
        return f"every level is above the band (pass@1 > {high:g}): too easy for this policy; add harder levels"
    if all(value < low for value in pass1.values()):
        return f"every level is below the band (pass@1 < {low:g}): too hard for this policy; add easier levels"
    return "pass@1 jumps across the band between two levels; add a level between them"


# Files ----------------------------------------------------------------------------------


def calibration_markdown(data: dict[str, Any]) -> str:
    low, high = data["band"]
    lines = [
        f"# Calibration: policy {data['policy']}" + (f", model {data['model']}" if data["policy"] == "model" else ""),
        "",
        f"{data['tasks_per_level']} eval tasks x {data['samples_per_task']} samples per level and language "
        f"(seed {data['seed']}); pass@1 and mean shaped reward with their 95% t-intervals over tasks; "
        f"target band {low:g}-{high:g} for pass@1.",
        "",
        "| family | level | params | language | tasks | pass@1 | 95% CI | shaped | 95% CI |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def show(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for cell in data["cells"]:
        lines.append(
            f"| {cell['family']} | {cell['level']} | {_params_text(cell['params'])} | {cell['language']} | "
            f"{cell['tasks']} | {show(cell['pass@1'])} | {show(cell['pass@1_ci95'])} | "
            f"{show(cell['reward_shaped'])} | {show(cell['reward_shaped_ci95'])} |"
        )
    lines += ["", "## Proposal", ""]
    for family, proposal in data["proposal"].items():
        if proposal["chosen"] is None:
            lines.append(
                f"- **{family}**: no level has pass@1 in {low:g}-{high:g}; "
                f"{why_none(proposal['pass@1_by_level'], (low, high))}."
            )
        else:
            lines.append(
                f"- **{family}**: levels in band {', '.join(map(str, proposal['levels_in_band']))}; "
                f"chosen level {proposal['chosen']} (pass@1 {proposal['pass@1_by_level'][proposal['chosen']]:.3f})."
            )
    lines.append("")
    if data["preset"]:
        lines.append(
            f"`{PRESET_FILE}` trains on the chosen levels: copy it to experiments/NAME.yaml and run "
            "`python -m piexp experiment=NAME`."
        )
    else:
        lines.append(f"No family has a level in the band, so no preset was written ({PRESET_FILE}).")
    return "\n".join(lines) + "\n"


def preset_text(data: dict[str, Any], params: dict[tuple[str, int], dict[str, Any]]) -> str | None:
    """`experiments/` format: mode=train on the families with a chosen level, at that level
    (`params`: each family x level's parameters as its eval ran them, the user's included)."""
    chosen = {family: p["chosen"] for family, p in data["proposal"].items() if p["chosen"] is not None}
    if not chosen:
        return None
    low, high = data["band"]
    lines = [
        f"# calibrated: written by `python -m piexp calibrate` for policy {data['policy']}"
        + (f" ({data['model']})" if data["policy"] == "model" else "")
        + f"; each family at the level whose pass@1 lies in {low:g}-{high:g}, nearest the middle.",
        "# Copy it to experiments/NAME.yaml and train with `python -m piexp experiment=NAME`.",
        "defaults:",
        "  - override /mode: train",
        f"  - override /family: [{', '.join(chosen)}]",
        f"lang: [{', '.join(data['languages'])}]",
        "family:",
    ]
    for family, level in chosen.items():
        pass1 = data["proposal"][family]["pass@1_by_level"][level]
        lines.append(f"  {family}:  # level {level}, pass@1 {pass1:.3f}")
        lines += [f"    {name}: {value}" for name, value in params[(family, level)].items()]
    return "\n".join(lines) + "\n"


def plot_levels(data: dict[str, Any], path: Path) -> None:
    """pass@1 and mean shaped reward against level, one panel per family x language."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families, languages = list(data["families"]), list(data["languages"])
    figure, panels = plt.subplots(
        len(families), len(languages), figsize=(4.0 * len(languages), 3.0 * len(families)), squeeze=False
    )
    for row, family in enumerate(families):
        for column, language in enumerate(languages):
            axes = panels[row][column]
            cells = [c for c in data["cells"] if c["family"] == family and c["language"] == language]
            for key, label in (("pass@1", "pass@1"), ("reward_shaped", "mean shaped reward")):
                shown = [c for c in cells if c[key] is not None]
                axes.errorbar(
                    [c["level"] for c in shown],
                    [c[key] for c in shown],
                    yerr=[c[f"{key}_ci95"] or 0.0 for c in shown],
                    marker="o",
                    capsize=3,
                    label=label,
                )
            low, high = data["band"]
            axes.axhspan(low, high, color="grey", alpha=0.15, label="target band")
            axes.set_ylim(-0.05, 1.05)
            axes.set_xticks(sorted({c["level"] for c in cells}))
            axes.set_xlabel("difficulty level")
            axes.set_title(f"{family} x {language}")
            axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, metadata={"Description": "pass@1 and mean shaped reward vs difficulty level, 95% CIs"})
    plt.close(figure)


def write_calibration(out: Path, levels: Sequence[Level], settings: dict[str, Any]) -> dict[str, Any]:
    """Aggregate the levels' episodes and write the table, plot and preset."""
    from piexp.files import atomic_write_text

    band = tuple(settings["band"])
    cells = [cell for level in levels for cell in level_cells(level)]
    expected = sum(level.episodes() for level in levels)
    data: dict[str, Any] = {
        **settings,
        "complete": sum(cell["episodes"] for cell in cells) >= expected,
        "episodes_expected": expected,
        "difficulty": {
            family: declared_family(family).difficulty.describe()  # type: ignore[union-attr]
            for family in settings["families"]
        },
        "cells": cells,
        "proposal": propose(cells, band),
    }
    ran = {
        (level.family, level.level): {k: v for k, v in level.config.family[level.family].items() if k != "_target_"}
        for level in levels
    }
    preset = preset_text(data, ran)
    data["preset"] = PRESET_FILE if preset else None
    atomic_write_text(out / RunFolder.CALIBRATION_JSON, json.dumps(data, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out / RunFolder.CALIBRATION_MD, calibration_markdown(data))
    plot_levels(data, out / RunFolder.CALIBRATION_PNG)
    if preset:
        atomic_write_text(out / PRESET_FILE, preset)
    elif (out / PRESET_FILE).exists():
        (out / PRESET_FILE).unlink()  # a resumed calibration whose band now holds nothing
    return data
