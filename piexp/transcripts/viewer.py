"""The run viewer: one self-contained `viewer.html` (the page, its script and its data
inline; no network, no server) showing a run's episodes in a filterable table with
counts, a per-cell pass grid, the tool-call failure table, and each episode's
conversation, rendered only when it is opened. Given a second run it shows the two side
by side, episode against episode on the same task. For train runs it links the
cookbook's per-iteration HTML pages and plots the reward curve.

Transcripts are embedded as one JSON string each, parsed by the page when an episode is
opened, so a run of thousands of episodes loads at once and stays responsive.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.transcripts.failures import FAILURE_KINDS, summarize_failures
from piexp.transcripts.runs import RunView, load_run

VIEWER_FILE = RunFolder.VIEWER
_PAGE = "viewer_page.html"


def _cells(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per source, family x language: episodes, passes, failure summary."""
    grid: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for row in rows:
        cell = (
            grid.setdefault(row["source"], {})
            .setdefault(str(row["family"]), {})
            .setdefault(str(row["language"]), {"episodes": 0, "passed": 0, "failures": []})
        )
        cell["episodes"] += 1
        cell["passed"] += int(bool(row["passed"]))
        cell["failures"].append(row.get("failures"))
    for families in grid.values():
        for languages in families.values():
            for cell in languages.values():
                cell["failures"] = summarize_failures(cell["failures"])
    return grid


def _run_json(view: RunView, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "rows": view.rows,
        "cells": _cells(view.rows),
        "transcripts": [
            json.dumps(view.transcripts[row["id"]]) if row["id"] in view.transcripts else None for row in view.rows
        ],
        "train_pages": view.train_pages,
        "incomplete": view.incomplete,
        "curves": view.reward_curves,
        "controls": view.control_rows,
    }


def _pairs(a: RunView, b: RunView) -> list[dict[str, Any]]:
    """Episodes of `a` and `b` on the same task: (task, sample), plus language when both
    runs hold the same languages (base vs trained) and not when they differ (python vs
    javascript); check episodes also by policy (a check runs several on each task)."""
    same_languages = {r["language"] for r in a.rows} == {r["language"] for r in b.rows}

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return (
            row["source"],
            row["policy"] if row["source"] == "check" else None,
            row["task_id"],
            row["sample"],
            row["language"] if same_languages else None,
        )

    b_by_key = {key(row): row["id"] for row in b.rows}
    pairs, seen = [], set()
    for row in a.rows:
        pairs.append({"a": row["id"], "b": b_by_key.get(key(row))})
        seen.add(key(row))
    pairs += [{"a": None, "b": row["id"]} for row in b.rows if key(row) not in seen]
    return pairs


def _embed(data: Any) -> str:
    # "<" escaped: no "</script>" or "<!--" inside the script element, still valid JSON.
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def _named(view: RunView) -> str:
    """A run as the viewer's header names it: its folder and the harness that played it."""
    return f"{view.root} (harness {', '.join(view.harness_names()) or 'builtin'})"


def render_viewer(view: RunView, other: RunView | None = None) -> str:
    runs = [_run_json(view, _named(view))]
    if other is not None:
        runs.append(_run_json(other, _named(other)))
    data = {
        "title": f"piexp: {_named(view)}" + (f" vs {_named(other)}" if other is not None else ""),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "failure_kinds": FAILURE_KINDS,
        "runs": runs,
        "pairs": _pairs(view, other) if other is not None else None,
    }
    page = resources.files("piexp.transcripts").joinpath(_PAGE).read_text(encoding="utf-8")
    return page.replace("/*PIEXP_DATA*/null", _embed(data), 1)


def write_viewer(path: Path, view: RunView, other: RunView | None = None) -> Path:
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(render_viewer(view, other), encoding="utf-8")
    temporary.replace(path)
    return path


def write_run_viewer(run_dir: Path) -> Path | None:
    """`run_dir/viewer.html` for a finished eval, check or train run (None: nothing to show)."""
    try:
        view = load_run(Path(run_dir))
    except UserError:
        return None
    return write_viewer(Path(run_dir) / VIEWER_FILE, view)
