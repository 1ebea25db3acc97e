"""`mode=eval`: k samples per eval task and language, pass@k, rewards, metrics, stop reasons.

Every episode runs through tinker-cookbook's `do_group_rollout` with the evaluation
(binary) reward, whatever the policy: a scripted one offline, or `model` (a Tinker
sampler on the base model or a `tinker://` checkpoint). Results per family x language go
to `results.json`, `results.md` and `results.png` (pass@1 heatmap) in the run folder,
with the tool-call failure metrics (`piexp.transcripts.failures`); every episode's
transcript goes to `transcripts.jsonl.gz`, and `viewer.html` shows the run in a browser.

Resume: each finished (task, language, sample) episode is appended to `episodes.jsonl`
as soon as it completes, so an interrupted eval run again on the same folder
(`hydra.run.dir=<dir>`) skips what is done. Episodes whose rollout raised are not
recorded (a rerun retries them). An episode's transcript is written just before its
record; a resume keeps exactly the transcripts of the records it keeps.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from piexp.config.schema import RunConfig
from piexp.console import ProgressReport, say
from piexp.env.dataset import episode_settings
from piexp.env.episode import get_run_renderer
from piexp.env.reward import REWARD_METRICS
from piexp.errors import UserError
from piexp.files import read_jsonl
from piexp.env.splits import RunSplits
from piexp.policies import make_policy
from piexp.policies.rollout import EpisodeRecord, run_episode
from piexp.sandbox.client import close_sandbox_clients
from piexp.tasks import Task
from piexp.transcripts.failures import failure_markdown, summarize_failures
from piexp.transcripts.store import EVAL_TRANSCRIPTS, TranscriptWriter


EPISODES_FILE = "episodes.jsonl"
STATE_FILE = "eval_state.json"


class EvalIncompleteError(UserError):
    """Some episodes could not be run; the finished ones are kept for a resume."""

    exit_code = 1


@dataclass(frozen=True)
class Job:
    task: Task
    language: str
    sample: int

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.task.task_id, self.language, self.sample)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def eval_signature(config: RunConfig) -> dict[str, Any]:
    """What must not change between an interrupted eval and its resume: the records were
    produced by this policy, model and task generation."""
    return {
        "policy": config.eval_policy,
        "checkpoint": config.checkpoint,
        "model": config.model.name if config.eval_policy == "model" else None,
        "renderer": config.model.renderer,
        "seed": config.seed,
        "family_params": config.family,
        "reward_weights": config.reward.weights.model_dump(),
    }


# Resume ---------------------------------------------------------------------------------


def load_finished(run_dir: Path, config: RunConfig, digests: dict[str, str]) -> dict[tuple[str, str, int], EpisodeRecord]:
    """Finished records of this eval in `run_dir` (refusing a folder from another eval).

    A truncated last line (the process died mid-write) is ignored; records of tasks whose
    content changed (digest differs) are ignored too, so they are run again.
    """
    signature = eval_signature(config)
    state_path = run_dir / STATE_FILE
    if state_path.exists():
        previous = json.loads(state_path.read_text())
        if previous != json.loads(json.dumps(signature)):
            changed = sorted(k for k in signature if previous.get(k) != json.loads(json.dumps(signature[k])))
            raise UserError(
                f"{run_dir} holds an eval with different {', '.join(changed)}; "
                "resume only with the same settings, or use a fresh run folder"
            )
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(signature, indent=2, sort_keys=True) + "\n")
    finished: dict[tuple[str, str, int], EpisodeRecord] = {}
    path = run_dir / EPISODES_FILE
    if not path.exists():
        return finished
    for data in read_jsonl(path):
        if digests.get(data.get("task_id")) != data.get("task_digest"):
            continue
        record = EpisodeRecord.from_json(data)
        finished[record.key] = record
    return finished


# Aggregation ----------------------------------------------------------------------------


def summarize(records: Iterable[EpisodeRecord], k: int) -> dict[str, Any]:
    """Pass@1..k (unbiased, per task then averaged), mean binary and shaped reward, each
    reward metric's mean, stop-reason counts."""
    records = list(records)
    by_task: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        by_task[(record.task_id, record.language)].append(record)
    pass_k: dict[str, float] = {}
    for j in range(1, k + 1):
        values = [
            pass_at_k(len(rs), sum(r.reward == 1.0 for r in rs), j) for rs in by_task.values() if len(rs) >= j
        ]
        pass_k[f"pass@{j}"] = sum(values) / len(values) if values else 0.0
    count = len(records)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return {
        "tasks": len(by_task),
        "episodes": count,
        **pass_k,
        "reward_binary": mean([r.reward for r in records]),
        "reward_shaped": mean([r.shaped for r in records]),
        "metrics": {name: mean([r.metrics.get(name, 0.0) for r in records]) for name in REWARD_METRICS},
        "stop_reasons": dict(sorted(Counter(str(r.stop_reason) for r in records).items())),
        "mean_turns": mean([float(r.turns) for r in records]),
        "tool_failures": summarize_failures(r.failures for r in records),
    }


def build_results(config: RunConfig, records: Sequence[EpisodeRecord], k: int) -> dict[str, Any]:
    cells: dict[str, dict[str, Any]] = {}
    for family in config.families:
        cells[family] = {}
        for language in config.eval_languages:
            mine = [r for r in records if r.family == family and r.language == language]
            cells[family][language] = summarize(mine, k)
    return {
        "policy": config.eval_policy,
        "checkpoint": config.checkpoint,
        "model": config.model.name,
        "renderer": config.model.renderer,
        "k": k,
        "families": config.families,
        "languages": config.eval_languages,
        "overall": summarize(records, k),
        "cells": cells,
        "per_task": [
            {"task_id": task_id, "family": rs[0].family, "language": language, "n": len(rs),
             "correct": sum(r.reward == 1.0 for r in rs)}
            for (task_id, language), rs in sorted(_group(records).items())
        ],
    }


def _group(records: Iterable[EpisodeRecord]) -> dict[tuple[str, str], list[EpisodeRecord]]:
    grouped: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        grouped[(record.task_id, record.language)].append(record)
    return grouped


# What each column of results.md means (the reward's own definitions: env/reward.py).
METRIC_MEANINGS = {
    "pass@j": "share of tasks solved by at least one of j samples (unbiased estimator over the k samples)",
    "binary": "mean binary reward: 1 only when the episode wrote or edited a file, ran a program that printed "
              "the right answer, and stated it",
    "shaped": "mean shaped reward: weighted partial credit for those four steps (reward.weights), 1 when all hold",
    "tool_called": "share of episodes with at least one tool call",
    "mutation_succeeded": "share with a successful write or edit",
    "execution_succeeded": "share with a bash command that ran (status ok)",
    "execution_output_correct": "share where a program's output contained the answer",
    "response_answer_correct": "share whose final message's last integer is the answer",
    "functional_correct": "share with all four of the above (the binary reward)",
    "infrastructure_error": "share where the sandbox itself failed (not the program's fault)",
}
_MAX_PASS_COLUMNS = 6  # beyond this many pass@j columns, show j = 1, 2, 4, 8, ... and k


def _pass_columns(k: int) -> list[int]:
    """The j of pass@j shown in tables: all of 1..k, or powers of two and k when k is large."""
    if k <= _MAX_PASS_COLUMNS:
        return list(range(1, k + 1))
    shown = [j for j in (1 << n for n in range(k.bit_length())) if j < k]
    return [*shown, k]


def _failing_tasks(results: dict[str, Any]) -> list[str]:
    """Per cell, the tasks no sample solved and those only some solved."""
    lines = ["## Failing tasks", ""]
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in results["per_task"]:
        if row["correct"] < row["n"]:
            cells[(row.get("family", "?"), row["language"])].append(row)
    if not cells:
        return lines + ["Every sample of every task was solved.", ""]
    for (family, language), rows in sorted(cells.items()):
        never = [r["task_id"] for r in rows if r["correct"] == 0]
        some = [f"{r['task_id']} ({r['correct']}/{r['n']})" for r in rows if r["correct"] > 0]
        lines.append(f"- **{family} x {language}**: " + "; ".join(filter(None, [
            f"never solved: {', '.join(never)}" if never else "",
            f"solved by some samples: {', '.join(some)}" if some else "",
        ])))
    return lines + ["", "`python -m piexp show RUN --failed --task TASK_ID` prints such an episode's conversation.", ""]


def results_markdown(results: dict[str, Any]) -> str:
    k = results["k"]
    shown = _pass_columns(k)
    languages, cells = results["languages"], results["cells"]
    subject = results["policy"] + (f" ({results['checkpoint'] or results['model']})" if results["policy"] == "model" else "")
    lines = [f"# Eval results: {subject}", "", f"k = {k} samples per task; binary reward decides a pass.", ""]
    lines += ["## pass@1 by family x language", "", "| family | " + " | ".join(languages) + " |",
              "|---|" + "---|" * len(languages)]
    for family, row in cells.items():
        lines.append(f"| {family} | " + " | ".join(f"{row[lang]['pass@1']:.3f}" for lang in languages) + " |")
    overall = results["overall"]
    lines.append("")
    lines.append("Overall: " + ", ".join(f"pass@{j} {overall[f'pass@{j}']:.3f}" for j in shown)
                 + f", shaped reward {overall['reward_shaped']:.3f} over {overall['episodes']} episodes.")
    lines += ["", "## Per cell: outcomes", "",
              "| family | language | tasks | episodes | " + " | ".join(f"pass@{j}" for j in shown)
              + " | binary | shaped | stop reasons |",
              "|---|---|---|---|" + "---|" * (len(shown) + 3)]
    for family, row in cells.items():
        for language in languages:
            cell = row[language]
            stops = ", ".join(f"{name} {count}" for name, count in cell["stop_reasons"].items())
            lines.append(
                f"| {family} | {language} | {cell['tasks']} | {cell['episodes']} | "
                + " | ".join(f"{cell[f'pass@{j}']:.3f}" for j in shown)
                + f" | {cell['reward_binary']:.3f} | {cell['reward_shaped']:.3f} | {stops} |"
            )
    lines += ["", "## Per cell: reward steps", "",
              "| family | language | " + " | ".join(REWARD_METRICS) + " |",
              "|---|---|" + "---|" * len(REWARD_METRICS)]
    for family, row in cells.items():
        for language in languages:
            cell = row[language]
            lines.append(f"| {family} | {language} | "
                         + " | ".join(f"{cell['metrics'][name]:.3f}" for name in REWARD_METRICS) + " |")
    lines += ["", *_failing_tasks(results)]
    lines += ["## What the columns mean", ""]
    lines += [f"- `{name}`: {meaning}" for name, meaning in METRIC_MEANINGS.items()]
    lines += ["", failure_markdown(results["overall"]["tool_failures"], {
        family: {language: cell["tool_failures"] for language, cell in row.items()} for family, row in cells.items()
    })]
    return "\n".join(lines)


def plot_heatmap(results: dict[str, Any], path: Path) -> None:
    """pass@1 by family (rows) x language (columns), values written in the cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families, languages = list(results["cells"]), results["languages"]
    values = [[results["cells"][f][lang]["pass@1"] for lang in languages] for f in families]
    figure, axes = plt.subplots(figsize=(1.6 + 1.3 * len(languages), 1.0 + 0.45 * len(families)))
    image = axes.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    axes.set_xticks(range(len(languages)), labels=languages)
    axes.set_yticks(range(len(families)), labels=families)
    for row, family_values in enumerate(values):
        for column, value in enumerate(family_values):
            axes.text(column, row, f"{value:.2f}", ha="center", va="center",
                      color="black" if value > 0.6 else "white", fontsize=9)
    axes.set_title(f"pass@1: {results['policy']}")
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (run_dir / "results.md").write_text(results_markdown(results))
    plot_heatmap(results, run_dir / "results.png")
    from piexp.transcripts.viewer import write_run_viewer

    write_run_viewer(run_dir)


# The eval -------------------------------------------------------------------------------


def run_eval(config: RunConfig, run_dir: Path, sandbox_url: str, splits: RunSplits) -> float | None:
    """Evaluate `config.eval_policy` on the eval split; returns the mean pass@1."""
    return asyncio.run(_run_eval(config, Path(run_dir), sandbox_url, splits))


async def _build_policy(config: RunConfig, tasks: Sequence[Task]) -> Any:
    if config.eval_policy == "model":
        from piexp.policies import build_model_policy

        return await build_model_policy(config)
    renderer = get_run_renderer(episode_settings(config, "").resolved_renderer_name(), config.model.name)
    return make_policy(config.eval_policy, renderer, tasks)


async def _run_eval(config: RunConfig, run_dir: Path, sandbox_url: str, splits: RunSplits) -> float:
    k = config.samples_per_task
    digests = {task.task_id: task.task_digest for task in splits.eval}
    finished = load_finished(run_dir, config, digests)
    jobs = [Job(task, language, sample) for task in splits.eval for language in config.eval_languages
            for sample in range(k)]
    todo = [job for job in jobs if job.key not in finished]
    if finished:
        say(f"resuming: {len(jobs) - len(todo)} of {len(jobs)} episodes already done in {run_dir}")
    errors: list[EpisodeRecord] = []
    started = time.perf_counter()
    try:
        if todo:
            policy = await _build_policy(config, [*splits.train, *splits.eval])
            settings = episode_settings(config, sandbox_url)
            semaphore = asyncio.Semaphore(getattr(config.mode, "max_concurrency", 8))

            async def one(job: Job) -> EpisodeRecord:
                async with semaphore:
                    return await run_episode(
                        policy, config.eval_policy, job.task, job.language, settings, sample=job.sample
                    )

            sink_path = run_dir / EPISODES_FILE
            if sink_path.exists() and not sink_path.read_bytes().endswith(b"\n") and sink_path.stat().st_size:
                # The last run died mid-line: start on a fresh line so that record stays
                # unreadable (and is redone) instead of corrupting the next one.
                with sink_path.open("a") as sink:
                    sink.write("\n")
            with sink_path.open("a") as sink, TranscriptWriter(run_dir / EVAL_TRANSCRIPTS, keep={
                (config.eval_policy, *key) for key in finished
            }) as transcripts, ProgressReport(f"eval {config.eval_policy}", len(todo)) as progress:
                pending = [asyncio.ensure_future(one(job)) for job in todo]
                try:
                    for done in asyncio.as_completed(pending):
                        record = await done
                        progress.advance()
                        if record.error:
                            errors.append(record)
                            continue
                        if record.transcript is not None:
                            transcripts.write({**record.transcript, "task_digest": digests[record.task_id]})
                        sink.write(json.dumps({**record.to_json(), "task_digest": digests[record.task_id]}) + "\n")
                        sink.flush()  # a finished episode survives an interruption right after it
                        finished[record.key] = record
                finally:
                    # Interrupted: stop the episodes still running; what finished is on disk.
                    for task in pending:
                        task.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
    finally:
        await close_sandbox_clients()
    wanted = {job.key for job in jobs}
    records = [finished[key] for key in sorted(finished) if key in wanted]
    results = build_results(config, records, k)
    results["wall_s"] = round(time.perf_counter() - started, 3)
    results["episodes_expected"] = len(jobs)
    results["episodes_failed_to_run"] = len(errors)
    write_results(run_dir, results)
    say(_summary_table(results))
    say(f"wrote {run_dir / 'results.json'}, results.md, results.png, viewer.html")
    if errors:
        raise EvalIncompleteError(
            f"{len(errors)} of {len(jobs)} eval episodes could not be run (first: {errors[0].task_id} "
            f"{errors[0].language}: {errors[0].error}). The finished ones are saved; run the same command "
            f"with hydra.run.dir={run_dir} to retry the rest."
        )
    return float(results["overall"]["pass@1"])


def _summary_table(results: dict[str, Any]) -> Table:
    languages = results["languages"]
    table = Table(
        title=f"pass@1 ({results['policy']}, k={results['k']})",
        caption=f"overall pass@1 {results['overall']['pass@1']:.3f} over {results['overall']['episodes']} episodes",
    )
    table.add_column("family")
    for language in languages:
        table.add_column(language, justify="right")
    for family, row in results["cells"].items():
        table.add_row(family, *(f"{row[lang]['pass@1']:.3f}" for lang in languages))
    return table
