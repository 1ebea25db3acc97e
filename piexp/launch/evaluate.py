"""`mode=eval`: k samples per eval task and language, pass@k, rewards, metrics, stop reasons.

Every episode runs through tinker-cookbook's `do_group_rollout` with the evaluation
(binary) reward, whatever the policy: a scripted one offline, or `model` (a Tinker
sampler on the base model or a `tinker://` checkpoint). Results per family x language go
to `results.json`, `results.md` and `results.png` (pass@1 heatmap) in the run folder,
with the tool-call failure metrics (`piexp.transcripts.failures`); every episode's
transcript goes to `transcripts.jsonl.gz`, and `viewer.html` shows the run in a browser.

Resume: each finished (task, language, sample) episode is appended to `episodes.jsonl`
as soon as it completes (`piexp.launch.episodes.EpisodeLog`), so an interrupted eval run again on the same folder
(`hydra.run.dir=<dir>`) skips what is done. Episodes whose rollout raised are not
recorded (a rerun retries them). An episode's transcript is written just before its
record; a resume keeps exactly the transcripts of the records it keeps.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tinker_cookbook.completers import TokenCompleter

from piexp.config.schema import EvalMode, RunConfig
from piexp.console import say
from piexp.env.dataset import episode_settings
from piexp.env.episode import get_run_renderer
from piexp.env.reward import REWARD_METRICS
from piexp.env.splits import RunSplits
from piexp.errors import RunIncompleteError, UserError
from piexp.harness.base import harness_class, make_harness
from piexp.launch.episodes import Episode, EpisodeKey, EpisodeLog, run_episodes
from piexp.launch.ray_rollouts import episode_play
from piexp.launch.eval_report import plot_heatmap, results_markdown, summary_table
from piexp.policies import make_policy
from piexp.policies.model import ModelServiceFailure
from piexp.policies.rollout import EpisodeRecord
from piexp.sandbox.availability import SandboxDown
from piexp.sandbox.client import close_sandbox_clients
from piexp.stats import pass_at_k
from piexp.tasks import Task
from piexp.transcripts.failures import summarize_failures
from piexp.transcripts.store import EVAL_TRANSCRIPTS


STATE_FILE = RunFolder.EVAL_STATE


class EvalIncompleteError(RunIncompleteError):
    """Some episodes could not be run; the finished ones are kept for a resume."""


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
        **(
            {"harness": config.harness.model_dump(mode="json", by_alias=True)}
            if harness_class(config.harness).recorded_in_runs
            else {}
        ),
    }


# Resume ---------------------------------------------------------------------------------


def claim_folder(run_dir: Path, config: RunConfig) -> None:
    """Record this eval's signature in `run_dir`, or refuse the folder when it holds an
    eval with another signature (its records would be mixed into this one's)."""
    signature = json.loads(json.dumps(eval_signature(config)))
    state_path = run_dir / STATE_FILE
    if not state_path.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(signature, indent=2, sort_keys=True) + "\n")
        return
    previous = json.loads(state_path.read_text())
    if previous != signature:
        changed = sorted(k for k in signature if previous.get(k) != signature[k])
        raise UserError(
            f"{run_dir} holds an eval with different {', '.join(changed)}; "
            "resume only with the same settings, or use a fresh run folder"
        )


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
        values = [pass_at_k(len(rs), sum(r.reward == 1.0 for r in rs), j) for rs in by_task.values() if len(rs) >= j]
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


def build_results(
    config: RunConfig, records: Sequence[EpisodeRecord], k: int, *, expected: Sequence[Episode] = ()
) -> dict[str, Any]:
    """The results of `records`; with the `expected` episodes, each cell and the whole
    also count the episodes that were not run (`not_run`), and `complete` says whether
    every one was."""
    cells: dict[str, dict[str, Any]] = {}
    expected_cells = Counter((episode.task.family, episode.language) for episode in expected)
    for family in config.families:
        cells[family] = {}
        for language in config.eval_languages:
            mine = [r for r in records if r.family == family and r.language == language]
            cells[family][language] = summarize(mine, k)
            if expected:
                cells[family][language]["not_run"] = expected_cells[(family, language)] - len(mine)
    return {
        "complete": not expected or len(records) >= len(expected),
        "episodes_expected": len(expected) if expected else len(records),
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
            {
                "task_id": task_id,
                "family": rs[0].family,
                "language": language,
                "n": len(rs),
                "correct": sum(r.reward == 1.0 for r in rs),
            }
            for (task_id, language), rs in sorted(_group(records).items())
        ],
    }


def _group(records: Iterable[EpisodeRecord]) -> dict[tuple[str, str], list[EpisodeRecord]]:
    grouped: dict[tuple[str, str], list[EpisodeRecord]] = defaultdict(list)
    for record in records:
        grouped[(record.task_id, record.language)].append(record)
    return grouped


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    (run_dir / RunFolder.RESULTS).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (run_dir / RunFolder.RESULTS_MD).write_text(results_markdown(results))
    plot_heatmap(results, run_dir / RunFolder.RESULTS_PNG)
    from piexp.transcripts.viewer import write_run_viewer

    write_run_viewer(run_dir)


# The eval -------------------------------------------------------------------------------


def run_eval(config: RunConfig, run_dir: Path, sandbox_url: str, splits: RunSplits) -> float | None:
    """Evaluate `config.eval_policy` on the eval split; returns the mean pass@1."""
    return asyncio.run(_run_eval(config, Path(run_dir), sandbox_url, splits))


# A checkpoint evaluated on a local server loads into one of its few LoRA adapter slots
# (max_lora_adapters), so a process that evaluates it several times on that server
# (calibrate: once per level) loads it once; by (server URL, checkpoint, sampling settings).
_local_checkpoint_policies: dict[tuple[Any, ...], TokenCompleter] = {}


async def _build_policy(config: RunConfig, tasks: Sequence[Task]) -> TokenCompleter:
    if config.eval_policy == "model":
        from piexp.policies import build_model_policy

        if not (config.checkpoint and config.service.name == "local"):
            return await build_model_policy(config)
        key = (
            config.service.base_url,
            config.checkpoint,
            config.model.name,
            config.limits.max_generation_tokens,
            config.model.temperature,
        )
        if key not in _local_checkpoint_policies:
            _local_checkpoint_policies[key] = await build_model_policy(config)
        return _local_checkpoint_policies[key]
    renderer = get_run_renderer(episode_settings(config, "").resolved_renderer_name(), config.model.name)
    return make_policy(config.eval_policy, renderer, tasks)


async def _run_eval(config: RunConfig, run_dir: Path, sandbox_url: str, splits: RunSplits) -> float:
    assert isinstance(config.mode, EvalMode), "run_eval runs mode=eval only"
    k = config.samples_per_task
    claim_folder(run_dir, config)
    log = EpisodeLog(run_dir, EVAL_TRANSCRIPTS, {task.task_id: task.task_digest for task in splits.eval})
    finished: dict[EpisodeKey, EpisodeRecord] = log.finished()
    episodes = [
        Episode(config.eval_policy, task, language, sample)
        for task in splits.eval
        for language in config.eval_languages
        for sample in range(k)
    ]
    todo = [episode for episode in episodes if episode.key not in finished]
    if finished:
        say(
            f"resuming: {len(episodes) - len(todo)} of {len(episodes)} episodes already done in "
            f"{run_dir / RunFolder.EPISODES}"
        )
    errors: list[EpisodeRecord] = []
    stopped_by: SandboxDown | ModelServiceFailure | None = None
    started = time.perf_counter()
    harness = make_harness(config.harness)
    try:
        if todo:
            policy = await _build_policy(config, [*splits.train, *splits.eval])
            with log.appending(keep={(config.eval_policy, *key) for key in finished}) as append:

                def store(record: EpisodeRecord) -> None:
                    if record.error:
                        errors.append(record)  # not recorded: a rerun retries it
                        return
                    append(record)
                    finished[record.key] = record

                await run_episodes(
                    todo,
                    {config.eval_policy: policy},
                    episode_settings(config, sandbox_url),
                    label=f"eval {config.eval_policy}",
                    max_concurrency=config.mode.max_concurrency,
                    on_record=store,
                    play=episode_play(
                        config,
                        harness.play,
                        [config.eval_policy],
                        [*splits.train, *splits.eval],
                        model_policy=policy if config.eval_policy == "model" else None,
                    ),
                    retries=config.sandbox.episode_retries,
                )
    except (SandboxDown, ModelServiceFailure) as failure:
        stopped_by = failure  # the finished episodes are kept and reported below
    finally:
        await harness.aclose()
        await close_sandbox_clients()
    wanted = {episode.key for episode in episodes}
    records = [finished[key] for key in sorted(finished) if key in wanted]
    results = build_results(config, records, k, expected=episodes)
    results["harness"] = harness.identity()
    results["wall_s"] = round(time.perf_counter() - started, 3)
    results["episodes_failed_to_run"] = len(episodes) - len(records)
    write_results(run_dir, results)
    say(summary_table(results))
    say(f"wrote {run_dir / RunFolder.RESULTS}, {RunFolder.RESULTS_MD}, {RunFolder.RESULTS_PNG}, {RunFolder.VIEWER}")
    if config.mode.wandb_project:
        from piexp.launch.result_logging import eval_tables, log_result

        metrics, tables = eval_tables(results)
        files = [run_dir / name for name in (RunFolder.VIEWER, RunFolder.RESULTS_MD, RunFolder.RESULTS)]
        url = log_result(run_dir, config.mode.wandb_project, run_dir.name, config.model_dump(mode="json"), metrics,
                         tables, files, "eval", harness=results["harness"])  # fmt: skip
        say(f"logged to Weights & Biases project {config.mode.wandb_project}" + (f": {url}" if url else ""))
    missing = len(episodes) - len(records)
    resume = (
        f"The {len(records)} finished episodes are saved and this run is not marked complete; run the same "
        f"command with hydra.run.dir={run_dir} to play the other {missing} (no finished one is played twice)."
    )
    if stopped_by is not None:
        raise EvalIncompleteError(
            f"The eval stopped: {stopped_by}. {missing} of {len(episodes)} episodes were not run, and none "
            f"was scored for that failure. {resume}"
        )
    if errors:
        sandbox_failures = sum(record.infrastructure_failure for record in errors)
        why = (
            f"{sandbox_failures} because the sandbox could not run their program "
            f"(after {config.sandbox.episode_retries} retries each), {len(errors) - sandbox_failures} because "
            "the rollout raised"
        )
        raise EvalIncompleteError(
            f"{missing} of {len(episodes)} eval episodes could not be run ({why}; first: {errors[0].task_id} "
            f"{errors[0].language}: {errors[0].error}). {resume}"
        )
    return float(results["overall"]["pass@1"])
