"""Read a run back for viewing: the episodes of an eval run (`episodes.jsonl`), a check
run (`check.json`), both (an eval with its preflight check), or every job of a sweep
folder, each joined with its transcript; and, for train runs, the cookbook's
per-iteration HTML pages and the reward curve. `piexp show` and the viewer use this one
reader."""

from __future__ import annotations

from piexp.run_folder import RunFolder, harness_label

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.files import read_jsonl
from piexp.run_records import control_rows, metric_curve
from piexp.transcripts.store import (
    CHECK_TRANSCRIPTS,
    EPISODE_IDENTITY,
    EVAL_TRANSCRIPTS,
    TRAIN_TRANSCRIPTS,
    read_transcripts,
    transcript_key,
)

# The episode fields an index row carries (the rest stays in the transcript).
ROW_FIELDS = (
    *EPISODE_IDENTITY,
    "reward",
    "shaped",
    "stop_reason",
    "turns",
    "tool_calls",
    "answer",
    "expected",
    "wall_s",
    "failures",
    "error",
)


@dataclass
class RunView:
    root: Path
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per episode, with `id`, `job`, `source`
    transcripts: dict[int, dict[str, Any]] = field(default_factory=dict)  # row id -> transcript
    train_pages: list[str] = field(default_factory=list)  # cookbook HTML pages, relative to root
    reward_curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # job -> (step, reward)
    control_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # job -> its controls per step
    incomplete: list[str] = field(default_factory=list)  # one line per eval that could not run every episode
    harnesses: dict[str, str] = field(default_factory=dict)  # job -> the harness that played it, with its version

    def harness_names(self) -> list[str]:
        """The harnesses that played the view's episodes, each once, in job order."""
        return list(dict.fromkeys(self.harnesses.values()))


def _episode_lines(path: Path) -> list[dict[str, Any]]:
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for data in read_jsonl(path):
        latest[(data.get("task_id"), data.get("language"), data.get("sample"))] = data
    return [latest[key] for key in sorted(latest, key=str)]  # task order, not completion order


def _passed(source: str, episode: dict[str, Any]) -> bool:
    """An eval episode passes with binary reward 1; a check episode when it met its
    policy's expectation (the `crash` and `wrong` checks pass by earning nothing). Check
    runs recorded before the expectation was written per episode fall back to the reward."""
    if source == "check" and "expectation_violation" in episode:
        return episode["expectation_violation"] is None
    return episode.get("reward") == 1.0


def _add_source(
    view: RunView, folder: Path, job: str, source: str, episodes: list[dict[str, Any]], transcript_file: Path
) -> None:
    by_key = {transcript_key(t): t for t in read_transcripts(transcript_file)}
    for episode in episodes:
        row_id = len(view.rows)
        row = {name: episode.get(name) for name in ROW_FIELDS}
        row.update(id=row_id, job=job, source=source, passed=_passed(source, episode), harness=view.harnesses[job])
        row["expectation_violation"] = episode.get("expectation_violation") if source == "check" else None
        transcript = by_key.get(transcript_key(episode))
        row["has_transcript"] = transcript is not None
        if transcript is not None:
            view.transcripts[row_id] = transcript
        view.rows.append(row)


def _incomplete_note(folder: Path, job: str) -> str | None:
    """ "INCOMPLETE: ..." for an eval whose results lack episodes piexp's own parts could
    not run (results.json `complete: false`), else None."""
    results = RunFolder(folder).json_record(RunFolder.RESULTS)
    if not isinstance(results, dict) or results.get("complete") is not False:
        return None
    where = "" if job == "." else f"{job}: "
    return (
        f"{where}INCOMPLETE: {results.get('episodes_failed_to_run')} of {results.get('episodes_expected')} "
        "episodes could not be run (piexp's sandbox or model service failed; none was scored); the same command "
        "resumes the run"
    )


def _add_job(view: RunView, folder: Path, job: str) -> None:
    view.harnesses[job] = harness_label(RunFolder(folder).harness())
    if (note := _incomplete_note(folder, job)) is not None:
        view.incomplete.append(note)
    check = folder / RunFolder.CHECK
    if check.is_file():
        try:
            episodes = json.loads(check.read_text(encoding="utf-8")).get("episodes") or []
        except ValueError:
            episodes = []
        _add_source(view, folder, job, "check", episodes, folder / CHECK_TRANSCRIPTS)
    if (folder / RunFolder.EPISODES).is_file():
        _add_source(view, folder, job, "eval", _episode_lines(folder / RunFolder.EPISODES), folder / EVAL_TRANSCRIPTS)
    if (folder / TRAIN_TRANSCRIPTS).is_file():
        # A training run's episodes are their transcripts (no episode records beside them).
        trained = list(read_transcripts(folder / TRAIN_TRANSCRIPTS))
        for transcript in trained:
            row_id = len(view.rows)
            row = {name: transcript.get(name) for name in ROW_FIELDS}
            row.update(id=row_id, job=job, source="train", passed=transcript.get("reward") == 1.0)
            row["harness"] = view.harnesses[job]
            row.update(expectation_violation=None, has_transcript=True, iteration=transcript.get("iteration"))
            row["turns"] = len(transcript.get("turns") or [])
            row["tool_calls"] = sum(m.get("role") == "tool" for m in transcript.get("conversation") or [])
            view.transcripts[row_id] = transcript
            view.rows.append(row)
    metrics = RunFolder(folder).metrics()
    curve = metric_curve(metrics, "reward")
    if curve:
        view.reward_curves[job] = curve
    controls = control_rows(metrics)
    if controls:
        view.control_rows[job] = controls
    for page in sorted(folder.rglob("*.html")):
        if page.name != RunFolder.VIEWER:
            view.train_pages.append(str(page.relative_to(view.root)))


def load_run(target: Path) -> RunView:
    """Every episode under `target`: a run folder or a sweep folder."""
    target = Path(target)
    if not target.is_dir():
        raise UserError(
            f"Cannot show {target}: it is not a folder. Give a run folder (outputs/DATE/TIME) "
            "or a sweep folder (multirun/DATE/TIME)."
        )
    folders = RunFolder.jobs_under(target)
    if not folders and any(
        (target / name).is_file() for name in (RunFolder.CHECK, RunFolder.EPISODES, RunFolder.METRICS)
    ):
        folders = [target]  # a run folder without its .hydra (copied around, or written by a test)
    view = RunView(root=target)
    for folder in folders:
        _add_job(view, folder, "." if folder == target else str(folder.relative_to(target)))
    if not view.rows and not view.reward_curves:
        raise UserError(
            f"Cannot show {target}: it holds no episodes (no episodes.jsonl or check.json in it or "
            "its job folders) and no training metrics. Give the folder of an eval, check or train "
            "run, or of a sweep."
        )
    return view
