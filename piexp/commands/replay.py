"""`python -m piexp replay RUN [N ...] [filters] [reward overrides] [--out DIR] [--json]`:
play a training, eval or check run's recorded episodes again, in the harness that played
them, through today's renderer parse, tools, sandbox and reward (`piexp.launch.replay`;
a run of another Pi version than this piexp's is refused by name), and report which
replay identically and, for each that does not, the first difference. It plays the
episodes the run's mode played (a training run's training episodes, not its preflight
check's) unless `--source` names others. N are row numbers of `piexp show RUN --source
SOURCE`'s listing with the same filters (`--family`, `--lang`, `--policy`, `--failed`,
`--stop-reason`, `--task`). Reward overrides (`reward.NAME=V`)
replay under other reward settings. Writes `replay.json` and `replay.md` into `--out`
(default: a new `replay-<time>` folder in RUN); exits 1 when any episode differs."""

from __future__ import annotations

from piexp.run_folder import RunFolder

import argparse
import asyncio
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from piexp.console import say
from piexp.errors import UserError
from piexp.transcripts.store import SOURCE_TRANSCRIPTS, SOURCE_WORDS, default_source


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m piexp replay",
        description="Replay a run's recorded episodes against today's code and report what changed.",
    )
    parser.add_argument("run", type=Path, help="a training, eval or check run folder")
    parser.add_argument("items", nargs="*", help="row numbers of `piexp show RUN` (same filters), reward overrides")
    parser.add_argument("--family", action="append", help="only this family (repeatable)")
    parser.add_argument("--lang", action="append", help="only this language (repeatable)")
    parser.add_argument("--policy", action="append", help="only this policy (repeatable)")
    parser.add_argument(
        "--source",
        choices=tuple(SOURCE_TRANSCRIPTS),
        help="the eval's, check's or training's episodes (default: those the run's mode played)",
    )
    parser.add_argument("--failed", action="store_true", help="only episodes without binary reward 1")
    parser.add_argument("--stop-reason", action="append", help="only this stop reason (repeatable)")
    parser.add_argument("--task", help="only task ids containing this text")
    parser.add_argument("--out", type=Path, help="folder for replay.json and replay.md (default: RUN/replay-<time>)")
    parser.add_argument("--json", action="store_true", help="print replay.json instead of the table")
    return parser


def _split_items(items: Sequence[str]) -> tuple[list[int], list[str]]:
    numbers, overrides = [], []
    for item in items:
        if item.isdigit():
            numbers.append(int(item))
        elif "=" in item and item.split("=", 1)[0].lstrip("+~").startswith("reward"):
            overrides.append(item)
        else:
            raise UserError(
                f"replay takes row numbers and reward overrides (reward.weights.NAME=V), not {item!r}: the "
                "episodes are replayed under the run's other settings."
            )
    return numbers, overrides


def _table(outcomes: Sequence[Any]) -> Table:
    table = Table(title="replay: the first difference of each episode that changed")
    for column in ("episode", "where", "what", "recorded", "replayed"):
        table.add_column(column, overflow="fold")
    for outcome in outcomes:
        if outcome.difference is not None:
            d = outcome.difference
            table.add_row(outcome.episode, d.where, d.kind, json.dumps(d.recorded)[:200], json.dumps(d.replayed)[:200])
    return table


def _markdown(run: Path, outcomes: Sequence[Any]) -> str:
    same = sum(o.identical for o in outcomes)
    lines = [f"# Replay of {run}", "", f"{same} of {len(outcomes)} episodes replay identically.", ""]
    changed = [o for o in outcomes if not o.identical]
    if changed:
        lines += ["| episode | where | what | recorded | replayed |", "|---|---|---|---|---|"]
        for o in changed:
            d = o.difference
            recorded, replayed = (json.dumps(v).replace("|", "\\|")[:300] for v in (d.recorded, d.replayed))
            lines.append(f"| {o.episode} | {d.where} | {d.kind} | `{recorded}` | `{replayed}` |")
        lines.append("")
    lines += [
        "Tool results are compared by what the reward reads: for `bash` the status, return code, "
        "`output_correct` and the last non-empty stdout line; other tools' results whole.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_intermixed_args(list(argv))
    numbers, overrides = _split_items(args.items)
    run = args.run.resolve()
    from piexp.commands.reproduce import saved_overrides
    from piexp.commands.show import select
    from piexp.config.compose import load, validate_saved
    from piexp.transcripts.runs import load_run

    from piexp.harness.base import harness_class, refuse_another_harness
    from piexp.launch.rescore import refuse_unreplayable_harness

    folder = RunFolder(run)
    config = validate_saved(folder.config(), run)
    # Played again in the harness that played it: that harness as the run recorded it.
    refuse_unreplayable_harness(config)
    harness_class(config.harness).refuse_unusable(config.harness)
    refuse_another_harness((folder.manifest() or {}).get("harness"), config.harness, run, "replayed")
    if overrides:
        config = config.model_copy(update={"reward": load([*saved_overrides(run), *overrides]).reward})
    view = load_run(run)
    args.episode = None
    chosen = args.source is not None
    args.source = args.source or default_source(config.mode.name)
    rows = select(view, args)
    if numbers:
        if any(not 0 <= n < len(rows) for n in numbers):
            raise UserError(f"Row numbers run from 0 to {len(rows) - 1} in this listing (show's); got {numbers}.")
        rows = [rows[n] for n in numbers]
    transcripts = [view.transcripts.get(row["id"]) for row in rows]
    missing = [row for row, t in zip(rows, transcripts, strict=True) if t is None]
    if missing:
        raise UserError(f"Episode {missing[0]['task_id']} {missing[0]['language']} has no transcript to replay.")
    if not transcripts:
        raise UserError(
            f"No {SOURCE_WORDS[args.source]} of {run} match the filters: nothing to replay"
            + ("." if chosen else f" (replay plays the {args.source} episodes by default; --source chooses others).")
        )
    where = [f"rows {', '.join(map(str, numbers))} of `piexp show RUN --source {args.source}`"] if numbers else []
    where += [] if chosen else ["those its mode played; --source chooses others"]
    say(
        f"replaying {len(transcripts)} {SOURCE_WORDS[args.source]} of {run}"
        + (f" ({'; '.join(where)})" if where else "")
    )
    return _replay(run, config, [t for t in transcripts if t is not None], args)


def _replay(run: Path, config: Any, transcripts: list[dict[str, Any]], args: argparse.Namespace) -> int:
    from piexp.commands.rescore import _digests
    from piexp.env.dataset import episode_settings
    from piexp.env.episode import get_run_renderer
    from piexp.launch.base_model import register_local_model_tokenizer
    from piexp.harness.base import make_harness
    from piexp.launch.replay import replay_episode
    from piexp.launch.rescore import refuse_cut, task_answers
    from piexp.launch.sandbox import run_sandbox
    from piexp.sandbox.client import close_sandbox_clients

    for transcript in transcripts:
        refuse_cut(transcript)
    tasks = task_answers(config, transcripts, _digests(run))
    out = args.out or run / f"replay-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    register_local_model_tokenizer(config.model.name)
    with run_sandbox(config.sandbox) as sandbox_url:
        settings = episode_settings(config, sandbox_url)
        renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)

        async def replay_all() -> list[Any]:
            harness = make_harness(config.harness)
            try:
                return [
                    await replay_episode(t, tasks[str(t["task_id"])], settings, renderer, harness) for t in transcripts
                ]
            finally:
                await harness.aclose()
                await close_sandbox_clients()

        outcomes = asyncio.run(replay_all())
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "run": str(run),
        "source": args.source,
        "episodes": len(outcomes),
        "identical": sum(o.identical for o in outcomes),
        "outcomes": [o.to_json() for o in outcomes],
    }
    (out / RunFolder.REPLAY_JSON).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (out / RunFolder.REPLAY_MD).write_text(_markdown(run, outcomes))
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        if report["identical"] < len(outcomes):
            say(_table(outcomes))
        say(f"{report['identical']} of {len(outcomes)} episodes replay identically; wrote {out / RunFolder.REPLAY_MD}")
    return 0 if report["identical"] == len(outcomes) else 1
