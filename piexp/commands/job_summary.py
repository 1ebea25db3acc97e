"""One job of a run or sweep folder as `piexp summarize` reads it back: its overrides,
state (from the sweep's status files or the job's completion marker), the final and best
value of each key metric (from `results.json` for eval runs, `metrics.jsonl` for train
runs), its training curves, its online controls per step (train runs) and its pass@1 per
family x language; and the grouping of jobs
by setting (their overrides but the seed)."""

from __future__ import annotations

from piexp.run_folder import RunFolder, harness_label

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from piexp.errors import UserError

from piexp.run_records import TRAIN_KEYS, control_rows, finite_number, metric_curve, train_pass_curve
from piexp.stats import mean_ci95, share_ci95
from piexp.sweeps import STATUS_SUBDIR
from piexp.sweeps.status import STATUS_JSON
from piexp.transcripts.failures import failure_digest

KEY_METRICS = ("pass@1", "reward")
# results.json `overall` keys per key metric for eval runs.
EVAL_KEYS: dict[str, str] = {"pass@1": "pass@1", "reward": "reward_shaped"}


def eval_keys(config: Any) -> dict[str, str]:
    """`results.json` keys per key metric for an eval run: its reward is the reward of the
    run's own reward mode (reward=binary: the binary reward), as in training."""
    reward = config.get("reward") if isinstance(config, dict) else None
    binary = isinstance(reward, dict) and reward.get("mode") == "binary"
    return {**EVAL_KEYS, "reward": "reward_binary" if binary else EVAL_KEYS["reward"]}


@dataclass
class JobSummary:
    folder: Path
    name: str
    mode: str
    overrides: list[str]
    state: str
    harness: str = "builtin"  # the harness that played its episodes, with its version
    finals: dict[str, float | None] = field(default_factory=dict)
    # The half-width of the final pass@1's 95% interval: over an eval's tasks, or over the
    # episodes of a training run's last periodic eval (None when it has one value).
    final_pass_ci: float | None = None
    bests: dict[str, float | None] = field(default_factory=dict)
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    steps: int | None = None
    tool_failures: str = ""  # eval runs: failure kinds that occurred, with counts
    cells: dict[str, float | None] = field(default_factory=dict)  # eval runs: "family x language" -> pass@1
    not_run: int = 0  # eval runs: episodes piexp's sandbox or model service could not run (results incomplete)
    controls: list[dict[str, Any]] = field(default_factory=list)  # train runs: the online controls per step


def _recorded(run: RunFolder) -> tuple[dict[str, Any], list[str]]:
    """The job's recorded config and overrides; empty where unreadable (a job folder a
    summary lists whatever state it was left in)."""
    config: Any
    try:
        config = OmegaConf.to_container(run.config(), resolve=False)
    except UserError:
        config = {}
    try:
        overrides = run.overrides()
    except UserError:
        overrides = []
    return (config if isinstance(config, dict) else {}), overrides


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def sweep_states(root: Path) -> dict[str, str]:
    """Job folder (resolved) -> state, from the sweep status files under root."""
    states: dict[str, str] = {}
    for path in root.rglob(STATUS_JSON):
        data = _read_json(path) or {}
        for entry in (data.get("jobs") or {}).values():
            if isinstance(entry, dict) and entry.get("dir") and entry.get("state"):
                states[str(Path(entry["dir"]).resolve())] = str(entry["state"])
                # Job folders are recorded as Hydra saw them (maybe relative to its cwd).
                states[str((path.parent / Path(entry["dir"]).name).resolve())] = str(entry["state"])
                if path.parent.name == STATUS_SUBDIR.name:  # a single run's own table
                    states[str(path.parent.parent.resolve())] = str(entry["state"])
    return states


def summarize_job(folder: Path, root: Path, states: dict[str, str]) -> JobSummary:
    run = RunFolder(folder)
    config, overrides = _recorded(run)
    mode_block = config.get("mode")
    mode = str(mode_block.get("name", "?")) if isinstance(mode_block, dict) else "?"
    name = str(folder.relative_to(root)) if folder != root else folder.resolve().name
    state = states.get(str(folder.resolve()))
    if state is None:
        state = "complete" if run.completion() is not None else "incomplete"
    job = JobSummary(folder=folder, name=name, mode=mode, overrides=[str(o) for o in overrides], state=state,
                     harness=harness_label(run.harness()))  # fmt: skip

    results = run.json_record(RunFolder.RESULTS)
    if isinstance(results, dict) and isinstance(results.get("overall"), dict):
        for metric, key in eval_keys(config).items():
            value = finite_number(results["overall"].get(key))
            job.finals[metric] = job.bests[metric] = value
        job.tool_failures = _failure_column(results["overall"])
        if results.get("complete") is False:
            job.not_run = int(results.get("episodes_failed_to_run") or 0)
        per_task = [
            row["correct"] / row["n"]
            for row in results.get("per_task") or []
            if isinstance(row, dict) and isinstance(row.get("n"), int) and row["n"] > 0
        ]
        if per_task:
            job.final_pass_ci = mean_ci95(per_task)[1]
        for family, row in (results.get("cells") or {}).items():
            for language, cell in (row or {}).items():
                if isinstance(cell, dict):
                    job.cells[f"{family} x {language}"] = finite_number(cell.get("pass@1"))
    rows = run.metrics()
    if rows:
        passes = train_pass_curve(folder, rows)
        for metric in TRAIN_KEYS:
            curve = [(p.step, p.rate) for p in passes] if metric == "pass@1" else metric_curve(rows, metric)
            if curve:
                job.curves[metric] = curve
                job.finals[metric] = curve[-1][1]
                job.bests[metric] = max(value for _, value in curve)
        if passes and passes[-1].episodes is not None:
            job.final_pass_ci = share_ci95(passes[-1].rate, passes[-1].episodes)
        job.controls = control_rows(rows)
        steps = [int(row["step"]) for row in rows if isinstance(row.get("step"), int)]
        job.steps = max(steps) + 1 if steps else len(rows)
    return job


def _failure_column(overall: dict[str, Any]) -> str:
    return failure_digest(overall.get("tool_failures"))


def varying_overrides(jobs: Sequence[JobSummary]) -> list[list[str]]:
    """Per job, the overrides not shared by every job (all of them for a single job)."""
    if len(jobs) < 2:
        return [list(job.overrides) for job in jobs]
    common = set(jobs[0].overrides).intersection(*(set(job.overrides) for job in jobs[1:]))
    return [[o for o in job.overrides if o not in common] for job in jobs]


def seed_groups(jobs: Sequence[JobSummary]) -> dict[str, list[JobSummary]]:
    """Jobs grouped by their varying overrides other than `seed`: the runs of one setting."""
    groups: dict[str, list[JobSummary]] = {}
    for job, varying in zip(jobs, varying_overrides(jobs)):
        key = " ".join(o for o in varying if o.split("=", 1)[0].lstrip("+~") != "seed") or "(all)"
        groups.setdefault(key, []).append(job)
    return groups


def finished_values(members: Sequence[JobSummary], metric: str) -> list[float]:
    return [v for job in members if job.state in ("complete", "skipped") and (v := job.finals.get(metric)) is not None]
