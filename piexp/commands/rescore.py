"""`python -m piexp rescore RUN [reward overrides] [--source train|eval|check] [--out DIR]
[--json]`: what the recorded episodes of a training, eval or check run would earn under
other reward settings, without sampling or a sandbox (`piexp.launch.rescore`). It reads
the episodes the run's mode played (a training run's training episodes, not its preflight
check's) unless `--source` names others, and says which and how many. Overrides are Hydra's, restricted to `reward`:
`reward=binary`, `reward.weights.output=0.4,0.6,0.8` (a comma list is one setting per
value; several lists, every combination). With none, the run's own settings are rescored,
which checks that today's reward reproduces the recorded one. Writes `rescore.json`,
`rescore.md` and `rescore.png` into `--out` (default: a new `rescore-<time>` folder in
RUN)."""

from __future__ import annotations

from piexp.run_folder import RunFolder


import argparse
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from piexp.console import say
from piexp.errors import UserError
from piexp.transcripts.store import SOURCE_TRANSCRIPTS, SOURCE_WORDS, default_source, read_transcripts


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m piexp rescore",
        description="Recompute the rewards of a run's recorded episodes under other reward settings "
        "(no sampling, no sandbox).",
    )
    parser.add_argument("run", type=Path, help="a training, eval or check run folder")
    parser.add_argument(
        "overrides", nargs="*", help="reward overrides, e.g. reward=binary reward.weights.output=0.4,0.6"
    )
    parser.add_argument(
        "--source",
        choices=tuple(SOURCE_TRANSCRIPTS),
        help="which recorded episodes: train, eval or check (default: those the run's mode played)",
    )
    parser.add_argument("--out", type=Path, help="folder for rescore.json/.md/.png (default: RUN/rescore-<time>)")
    parser.add_argument("--json", action="store_true", help="print rescore.json instead of the summary")
    return parser


def _transcripts(run: Path, source: str) -> list[dict]:
    path = run / SOURCE_TRANSCRIPTS[source]
    transcripts = [t for t in read_transcripts(path) if "task_id" in t] if path.is_file() else []
    if not transcripts:
        held = [name for name, file in SOURCE_TRANSCRIPTS.items() if name != source and (run / file).is_file()]
        raise UserError(
            f"{run} holds no recorded {SOURCE_WORDS[source]} ({SOURCE_TRANSCRIPTS[source]}), which rescore reads "
            + (f"here; it holds {' and '.join(held)} episodes: choose them with --source {held[0]}." if held else
               "here; it holds no recorded episodes at all: rescore reads the transcripts of a training, eval or check run.")
        )  # fmt: skip
    return transcripts


def _digests(run: Path) -> dict[str, list[str]]:
    manifest = RunFolder(run).manifest(needed_for="its tasks cannot be verified")
    assert manifest is not None
    return dict(manifest.get("task_digests") or {})


def _settings(overrides: Sequence[str]) -> list[list[str]]:
    from piexp.config.compose import sweep_combinations

    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if "=" not in item or not (key == "reward" or key.startswith("reward.")):
            raise UserError(
                f"rescore takes reward overrides only (reward=binary, reward.weights.NAME=V1,V2), not {item!r}: "
                "the episodes were played under the run's other settings."
            )
    return [list(combination) for combination in sweep_combinations(list(overrides))] if overrides else [[]]


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_intermixed_args(list(argv))
    run = args.run.resolve()
    from piexp.commands.reproduce import saved_overrides
    from piexp.config.compose import load, validate_saved
    from piexp.launch.rescore import (
        plot_settings,
        refuse_cut,
        rescore_markdown,
        reproduction_check,
        score_setting,
        task_answers,
    )

    combinations = _settings(args.overrides)  # refused before anything is read or written
    config = validate_saved(RunFolder(run).config(), run)
    from piexp.harness.base import harness_class

    regrade = harness_class(config.harness).rescored_reward
    source = args.source or default_source(config.mode.name)
    transcripts = _transcripts(run, source)
    for transcript in transcripts:
        refuse_cut(transcript)
    tasks = task_answers(config, transcripts, _digests(run))
    reproduced, differ = reproduction_check(transcripts, tasks, config.reward, regrade)
    base = saved_overrides(run)
    scores = []
    for combination in combinations:
        reward = load([*base, *combination]).reward if combination else config.reward
        label = " ".join(combination) or "the run's own settings"
        rewards = [
            regrade(t, tasks[str(t["task_id"])].answer, reward, binary=reward.mode == "binary") for t in transcripts
        ]
        scores.append(score_setting(label, transcripts, rewards))
    out = args.out or run / f"rescore-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "run": str(run),
        "sampled_under": config.reward.model_dump(mode="json"),
        "note": "the rollouts were sampled under the run's own reward settings",
        "source": source,
        "episodes": len(transcripts),
        "reproduced": reproduced,
        "differ": differ,
        "settings": [
            {
                "label": s.label,
                "cells": s.cells,
                "mean": sum(s.rewards) / len(s.rewards),
                "constant_groups": s.constant_groups,
                "groups": s.groups,
            }
            for s in scores
        ],
    }
    (out / RunFolder.RESCORE_JSON).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (out / RunFolder.RESCORE_MD).write_text(rescore_markdown(run, scores, reproduced, differ, len(transcripts)))
    plot_settings(scores, out / RunFolder.RESCORE_PNG)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    say(
        f"rescored {len(transcripts)} {SOURCE_WORDS[source]} of {run} ({SOURCE_TRANSCRIPTS[source]}; "
        f"{'--source chose them' if args.source else 'those its mode played; --source chooses others'}), "
        "sampled under the run's own reward settings"
    )
    say(f"today's reward reproduces {reproduced} of {len(transcripts)} recorded rewards under the run's settings")
    for s in scores:
        say(f"  {s.label}: mean {sum(s.rewards) / len(s.rewards):.3f}, constant groups {s.constant_groups_text}")
    say(f"wrote {out / RunFolder.RESCORE_JSON}, {RunFolder.RESCORE_MD}, {RunFolder.RESCORE_PNG}")
    return 0
