"""`python -m piexp show RUN [N]`: what the model did, in the terminal or the browser.

Without N it lists the episodes of RUN (an eval or check run folder, or a sweep folder:
every job's), narrowed by `--family`, `--lang`, `--failed`, `--stop-reason`, `--task`,
`--policy`, `--source`, `--step` (a training run's step: N, first or last); with N (a row
number of that listing) it prints that episode's conversation: roles, code with syntax
highlighting, tool results summarised (status, return code, stdout head), the reward
breakdown and the tool-call failures. `--json` prints the same as JSON for scripts.
`--html` writes the run viewer instead (default `RUN/viewer.html`), side by side with
`--against OTHER`. `--atif DIR` writes the listed episodes as ATIF trajectories, one JSON
file each (docs/harbor.md).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from piexp.config.suggest import did_you_mean
from piexp.errors import UserError
from piexp.languages import LANGUAGES, language_of_path
from piexp.transcripts.runs import RunView, load_run

# Lines of a tool's stdout / stderr shown in the terminal (the transcript keeps more).
STDOUT_HEAD_LINES = 12


# Filters naming a value of a row field: (option, row field, what one value is, what several are).
_VALUE_FILTERS = (
    ("--family", "family", "family", "families"),
    ("--lang", "language", "language", "languages"),
    ("--policy", "policy", "policy", "policies"),
    ("--stop-reason", "stop_reason", "stop reason", "stop reasons"),
)


def refuse_absent_values(view: RunView, args: argparse.Namespace) -> None:
    """A filter value no episode of the run has (a typo, or another run's family) would
    list nothing and look like an answer: refused, naming the closest values it has."""
    for option, field, what, plural in _VALUE_FILTERS:
        wanted = getattr(args, option.lstrip("-").replace("-", "_")) or []
        present = sorted({str(row[field]) for row in view.rows})
        for value in wanted:
            if value not in present:
                raise UserError(
                    f"No episode of {view.root} has {what} {value!r}, so {option} {value} would list "
                    f"nothing.{did_you_mean(value, present)} Its episodes' {plural}: "
                    f"{', '.join(present) or 'none'}."
                )


def training_steps(view: RunView, wanted: Sequence[str] | None) -> set[int] | None:
    """The training steps `--step` names (numbers, `first`, `last`), or None without it;
    a step no training episode of the run has is refused, naming the steps it has."""
    if not wanted:
        return None
    present = sorted({int(row["iteration"]) for row in view.rows if row.get("iteration") is not None})
    if not present:
        raise UserError(
            f"{view.root} holds no training episodes, so --step would list nothing: --step narrows the "
            "episodes of a training run (mode=train) to the steps named."
        )
    steps = set()
    for value in wanted:
        if value in ("first", "last"):
            steps.add(present[0] if value == "first" else present[-1])
        elif value.isdigit() and int(value) in present:
            steps.add(int(value))
        else:
            raise UserError(
                f"--step {value}: the training episodes of {view.root} are of steps {present[0]} to "
                f"{present[-1]} ({len(present)} steps recorded); give one of them, first or last."
            )
    return steps


def select(view: RunView, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The rows the filters keep, in run order."""
    rows = []
    steps = training_steps(view, getattr(args, "step", None))
    for row in view.rows:
        if steps is not None and row.get("iteration") not in steps:
            continue
        if args.family and row["family"] not in args.family:
            continue
        if args.lang and row["language"] not in args.lang:
            continue
        if args.policy and row["policy"] not in args.policy:
            continue
        if args.source and row["source"] != args.source:
            continue
        if args.failed and row["passed"]:
            continue
        if args.stop_reason and str(row["stop_reason"]) not in args.stop_reason:
            continue
        if args.task and args.task not in str(row["task_id"]):
            continue
        rows.append(row)
    return rows


def _step(row: dict[str, Any]) -> str:
    return "" if row.get("iteration") is None else str(row["iteration"])


def _failures(failures: dict[str, int] | None) -> str:
    return ", ".join(f"{kind} {count}" for kind, count in (failures or {}).items() if count and kind != "calls")


def listing(rows: Sequence[dict[str, Any]], view: RunView) -> Table:
    jobs = len({row["job"] for row in view.rows}) > 1
    harnesses = view.harness_names()
    several = len(harnesses) > 1  # a sweep over harnesses: a column, else the title names it
    named = "" if several else f", harness {harnesses[0] if harnesses else 'builtin'}"
    trained = any(row.get("iteration") is not None for row in rows)  # a training step's episodes: its step
    table = Table(title=f"{view.root}: {len(rows)} of {len(view.rows)} episodes{named}", title_justify="left")
    for name in (
        "#",
        *(["job"] if jobs else []),
        *(["harness"] if several else []),
        "source",
        *(["step"] if trained else []),
        "policy",
        "task",
        "family",
        "lang",
        "sample",
        "answer",
        "expected",
        "reward",
        "shaped",
        "stop",
        "turns",
        "calls",
        "failures",
    ):
        table.add_column(name, justify="right" if name in ("#", "reward", "shaped", "turns", "calls") else "left")
    for number, row in enumerate(rows):
        colour = "green" if row["passed"] else "red"
        table.add_row(
            str(number),
            *([row["job"]] if jobs else []),
            *([str(row.get("harness"))] if several else []),
            row["source"],
            *([_step(row)] if trained else []),
            str(row["policy"]),
            str(row["task_id"]),
            str(row["family"]),
            str(row["language"]),
            str(row["sample"]),
            "" if row["answer"] is None else str(row["answer"]),
            "" if row.get("expected") is None else str(row["expected"]),
            f"[{colour}]{row['reward']:g}[/{colour}]" if row["reward"] is not None else "",
            f"{row['shaped']:.3f}" if row["shaped"] is not None else "",
            str(row["stop_reason"] or row.get("error") or ""),
            str(row["turns"]),
            str(row["tool_calls"]),
            _failures(row["failures"]),
        )
    return table


def _code(text: str, language: str | None) -> Syntax | Text:
    # Registry names are Pygments lexer names (tests/test_languages.py checks it).
    known = language in LANGUAGES
    return Syntax(text, language, word_wrap=True, theme="ansi_dark") if known and language else Text(text)


def _head(text: str) -> str:
    lines = text.splitlines()
    more = f"\n[... {len(lines) - STDOUT_HEAD_LINES} more lines]" if len(lines) > STDOUT_HEAD_LINES else ""
    return "\n".join(lines[:STDOUT_HEAD_LINES]) + more


def _call(call: dict[str, Any], language: str) -> list[Any]:
    arguments = call.get("arguments")
    parts: list[Any] = [Text(f"-> {call.get('name')}", style="bold cyan")]
    if not isinstance(arguments, dict):
        parts.append(Text(f"arguments (not JSON): {arguments}", style="red"))
        return parts
    path = arguments.get("path")
    file_spec = language_of_path(str(path))
    file_language = file_spec.name if file_spec else None
    for key, value in arguments.items():
        if key in ("content", "oldText", "newText") and isinstance(value, str):
            parts += [Text(f"   {key}:", style="dim"), _code(value, file_language or language)]
        else:
            parts.append(Text(f"   {key}: {value if isinstance(value, str) else json.dumps(value)}"))
    return parts


def _result(message: dict[str, Any]) -> list[Any]:
    result = message.get("result")
    if not isinstance(result, dict):
        return [Text(_head(str(message.get("text", ""))))]
    status = result.get("status") or ("error" if result.get("error") else "?")
    line = Text(f"{result.get('tool') or message.get('name')}: ", style="bold")
    line.append(status, style="green" if status == "ok" else "red")
    for key in ("return_code", "output_correct", "path", "bytes"):
        if key in result:
            line.append(f"  {key}={result[key]}")
    parts: list[Any] = [line]
    if result.get("error"):
        parts.append(Text(str(result["error"]), style="red"))
    for key in ("stdout", "stderr"):
        if result.get(key):
            parts.append(Text(f"{key}:\n{_head(str(result[key]))}", style="red" if key == "stderr" else ""))
    if "content" in result:
        parts.append(
            Text(f"content: {len(str(result['content']))} chars\n{_head(str(result['content']))}", style="dim")
        )
    return parts


def _answer(row: dict[str, Any]) -> str:
    """The stated answer, and the task's beside it (runs recorded before it was kept have none)."""
    expected = row.get("expected")
    return f"answer {row['answer']}" + ("" if expected is None else f" (expected {expected})")


def conversation(row: dict[str, Any], transcript: dict[str, Any] | None) -> Group:
    parts: list[Any] = [
        Text(
            f"{row['source']}{'' if row.get('iteration') is None else ' step ' + _step(row)} {row['policy']} {row['task_id']} ({row['family']} x {row['language']}, "
            f"sample {row['sample']}, harness {row.get('harness') or 'builtin'}): reward {row['reward']:g} binary, {row['shaped']:.3f} shaped; "
            f"stop {row['stop_reason']}; {_answer(row)}",
            style="bold",
        )
    ]
    if row["source"] == "check":
        violation = row.get("expectation_violation")
        parts.append(
            Text(
                f"check expectation of {row['policy']}: "
                + ("met" if row["passed"] else "not met" + (f" ({violation})" if violation else "")),
                style="green" if row["passed"] else "red",
            )
        )
    if transcript is None:
        return Group(*parts, Text("no transcript was recorded for this episode", style="yellow"))
    parts.append(
        Text("reward breakdown: " + ", ".join(f"{k} {v:g}" for k, v in (transcript.get("metrics") or {}).items()))
    )
    parts.append(
        Text(
            f"tool-call failures: {_failures(transcript.get('failures')) or 'none'} "
            f"({(transcript.get('failures') or {}).get('calls', 0)} calls)"
        )
    )
    turns = transcript.get("turns") or []
    parts.append(
        Text(
            "tokens per turn (prompt -> sampled): "
            + ", ".join(f"{t['prompt_tokens']}->{t['sampled_tokens']}" for t in turns)
            + f"; wall {transcript.get('wall_s')} s",
            style="dim",
        )
    )
    truncated = transcript.get("truncated") or {}
    if truncated.get("fields"):
        parts.append(
            Text(f"truncated: {truncated['fields']} field(s), {truncated['chars_cut']} chars cut", style="yellow")
        )
    if transcript.get("omitted"):
        parts.append(Text(str(transcript["omitted"]), style="yellow"))
    for message in transcript.get("prompt") or []:
        # The harness's own system prompt (Pi's), once; the conversation holds none.
        if message.get("role") in ("system", "user"):
            parts.append(
                Panel(Text(str(message.get("text", ""))), title=f"{message['role']} (prompt)", title_align="left")
            )
    for message in transcript.get("conversation") or []:
        role = message.get("role")
        body: list[Any] = []
        if message.get("thinking"):
            body.append(Text(str(message["thinking"]), style="italic dim"))
        if role == "tool":
            body += _result(message)
        elif message.get("text"):
            body.append(Text(str(message["text"])))
        for call in message.get("tool_calls") or []:
            body += _call(call, row["language"])
        for bad in message.get("unparsed_tool_calls") or []:
            body += [Text(f"unparsed tool call: {bad.get('error')}", style="red"), Text(str(bad.get("raw_text")))]
        title = str(role) + (f" ({message['not_in_history']})" if message.get("not_in_history") else "")
        style = {"assistant": "green", "tool": "yellow"}.get(str(role), "white")
        parts.append(Panel(Group(*body), title=title, title_align="left", border_style=style))
    for turn in turns:
        if turn.get("logs"):
            parts.append(Text(f"turn {turn['turn']}: {json.dumps(turn['logs'])}", style="red"))
    return Group(*parts)


def _console() -> Console:
    # Piped output (scripts, less) gets a wide page instead of rich's 80 columns.
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _viewer_path(given: str, file_name: str) -> Path:
    """Where `--html GIVEN` writes: GIVEN itself when it names an HTML file (`.html`),
    else GIVEN/viewer.html: GIVEN names a folder (one that exists, one written with a
    trailing slash, or a name without the suffix, never a page a browser would not open)."""
    path = Path(given)
    if path.is_dir() or given.endswith(("/", os.sep)) or path.suffix.lower() not in (".html", ".htm"):
        return path / file_name
    return path


def _write_atif(view: RunView, rows: list[dict[str, Any]], out: Path) -> int:
    from piexp.harbor.atif import write_trajectories

    episodes = [(row, view.transcripts[row["id"]]) for row in rows if row["id"] in view.transcripts]
    written = write_trajectories(out, episodes, view.root)
    missing = len(rows) - len(episodes)
    note = f" ({missing} listed episodes have no transcript)" if missing else ""
    print(f"wrote {len(written)} ATIF trajectories into {out}{note}")
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="piexp show", description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("run", type=Path, help="an eval or check run folder, or a sweep folder")
    parser.add_argument("episode", nargs="?", type=int, help="row number in the (filtered) listing: print it")
    parser.add_argument("--family", action="append", help="only this family (repeatable)")
    parser.add_argument("--lang", action="append", help="only this language (repeatable)")
    parser.add_argument("--policy", action="append", help="only this policy (repeatable; check runs have several)")
    parser.add_argument(
        "--source",
        choices=("eval", "check", "train"),
        help="only the eval's, the preflight check's or the training's episodes",
    )
    parser.add_argument(
        "--failed",
        action="store_true",
        help="only failed episodes: an eval's without binary reward 1, a check's that did not meet its "
        "policy's expectation (crash and wrong are expected to earn nothing)",
    )
    parser.add_argument("--stop-reason", action="append", help="only this stop reason (repeatable)")
    parser.add_argument("--task", help="only task ids containing this text")
    parser.add_argument(
        "--step",
        action="append",
        metavar="N",
        help="only the training episodes of step N (first, last or a number; repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (the listing, or the transcript)")
    parser.add_argument(
        "--html",
        nargs="?",
        const=True,
        default=None,
        metavar="PATH",
        help="write the run viewer (default RUN/viewer.html; PATH ending in .html is the page itself, any other "
        "PATH a folder, made if missing, that gets PATH/viewer.html) instead",
    )
    parser.add_argument("--against", type=Path, help="with --html: a second run shown side by side")
    parser.add_argument(
        "--atif", type=Path, metavar="DIR", help="write the listed episodes as ATIF trajectories into DIR"
    )
    args = parser.parse_intermixed_args(list(argv))  # RUN N may follow the options
    if args.against is not None and args.html is None:
        raise UserError("--against compares two runs in the browser viewer: add --html.")
    view = load_run(args.run)
    if args.html is not None:
        from piexp.transcripts.viewer import VIEWER_FILE, write_viewer

        other = load_run(args.against) if args.against is not None else None
        target = args.run / VIEWER_FILE if args.html is True else _viewer_path(args.html, VIEWER_FILE)
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"wrote {write_viewer(target, view, other)}")
        return 0
    refuse_absent_values(view, args)
    rows = select(view, args)
    if args.atif is not None and args.episode is None:
        return _write_atif(view, rows, args.atif)
    if args.episode is None:
        if args.json:
            print(json.dumps([{"number": n, **row} for n, row in enumerate(rows)], indent=1))
        else:
            for note in view.incomplete:
                _console().print(f"[red]{note}[/red]")
            _console().print(listing(rows, view))
        return 0
    if not 0 <= args.episode < len(rows):
        raise UserError(
            f"There is no episode {args.episode}: the listing of {args.run} with these filters has "
            f"{len(rows)} (numbered from 0). Run the same command without the number to see them."
        )
    row = rows[args.episode]
    if args.atif is not None:
        return _write_atif(view, [row], args.atif)
    transcript = view.transcripts.get(row["id"])
    if args.json:
        print(json.dumps({"episode": row, "transcript": transcript}, indent=1))
    else:
        _console().print(conversation(row, transcript))
    return 0
