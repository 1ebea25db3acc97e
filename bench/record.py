"""Benchmark results as data, shared by the benches: each bench ends by appending one
record of what it printed to `bench/results/NAME.jsonl` (NAME: the bench's file name),
with the git commit it ran at, the date, the machine's CPU model and core count, and the
command line. `python bench/report.py` writes docs/benchmarks.md from the latest record
of each file. Not a bench itself: it measures nothing.

A record is one JSON object a line: `bench`, `date` (UTC, YYYY-MM-DD), `commit` (short
hash, `-dirty` when the tree had changes; null when not known), `machine` (`cpu`,
`cores`, and `note` for what else is known of it), `command`, `source` ("measured", or
"recorded from docs" for figures copied from the text they were first stated in),
`tables` (each `title`, `columns`, `rows` of strings) and `notes` (sentences)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (None where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine() -> dict[str, Any]:
    """The machine a bench runs on: CPU model and the cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "cores": cores}


def git_commit() -> str | None:
    """The checkout's short commit, with `-dirty` when tracked files differ from it (the
    records under bench/results/ aside: a bench run that records after another changes
    them, not the code it measures)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results"],
            cwd=REPO, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("-dirty" if changed else "")


def table_data(table: Any) -> dict[str, Any]:
    """A rich `Table` (or an already plain dict) as `title`, `columns`, `rows` of plain text."""
    if isinstance(table, dict):
        return {
            "title": table.get("title", ""),
            "columns": [str(c) for c in table["columns"]],
            "rows": [[str(c) for c in row] for row in table["rows"]],
        }

    def plain(cell: Any) -> str:
        return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain

    columns = list(table.columns)
    cells = [[plain(cell) for cell in column.cells] for column in columns]
    return {
        "title": plain(table.title or ""),
        "columns": [plain(column.header) for column in columns],
        "rows": [list(row) for row in zip(*cells)],
    }


class RecordingConsole(Console):
    """A rich Console that also keeps what a bench prints through it: its tables and its
    lines of text, for `record(__file__, console.tables, console.lines)`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tables: list[Table] = []
        self.lines: list[str] = []

    def print(self, *objects: Any, **kwargs: Any) -> None:
        for item in objects:
            if isinstance(item, Table):
                self.tables.append(item)
            elif isinstance(item, str):
                self.lines.append(Text.from_markup(item).plain)
        super().print(*objects, **kwargs)


def record(
    bench_file: str,
    tables: list[Any],
    notes: list[str] | tuple[str, ...] = (),
    command: str | None = None,
    results: Path | None = None,
) -> Path:
    """Append this run's record for the bench at `bench_file` (pass `__file__`); return
    the results file. `tables`: rich Tables or dicts with `title`, `columns`, `rows`.
    `results`: the folder, by default $PIEXP_BENCH_RESULTS (a smoke run's scratch
    folder: tests/test_bench_smoke.py), else bench/results."""
    if results is None:
        results = Path(os.environ.get("PIEXP_BENCH_RESULTS") or RESULTS)
    name = Path(bench_file).stem
    entry = {
        "bench": name,
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "commit": git_commit(),
        "machine": machine(),
        "command": command or " ".join(["python", f"bench/{name}.py", *sys.argv[1:]]),
        "source": "measured",
        "tables": [table_data(table) for table in tables],
        "notes": list(notes),
    }
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{name}.jsonl"
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    print(f"recorded in {path.relative_to(REPO) if path.is_relative_to(REPO) else path}", file=sys.stderr)
    return path
