"""`mode=check`, and the preflight of `mode=train` / model evaluation.

Before any GPU money is spent, prove through the exact path a model will use (renderer ->
parse -> tools -> sandbox -> reward, driven by tinker-cookbook's `do_group_rollout`) that

* every language runtime the run asks for answers a hello world in the sandbox; a missing
  runtime is reported as missing (not as failing tasks) and fails only if it is asked for;
* every (family, language) cell is solvable: the `oracle` earns binary reward 1.0 on the
  first N tasks of the cell in both splits;
* a non-solution earns nothing: `guess` gets binary 0 and shaped 0 (or the answer weight
  when its guess happens to be right), `crash` and `wrong` binary 0 and shaped < 0.5, and
  `edit` (broken program, fixed with `edit`) binary 1.0, on a sample of each cell.

Any violation raises `CheckFailedError` naming the cell and task; `check.json` in the run
folder keeps the whole picture (runtimes, per-cell counts, tool-call failures, every
episode), `check_transcripts.jsonl.gz` every episode's conversation and `viewer.html`
shows them in a browser.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from piexp.config.defaults import default_settings
from piexp.config.schema import CheckMode, EvalMode, RunConfig
from piexp.console import say
from piexp.env.dataset import episode_settings
from piexp.env.episode import get_run_renderer
from piexp.env.splits import RunSplits
from piexp.errors import RunIncompleteError, UserError
from piexp.harness.base import make_harness
from piexp.languages import language as registered_language
from piexp.launch.episodes import Episode, run_episodes
from piexp.launch.ray_rollouts import episode_play
from piexp.policies import make_policy
from piexp.policies.scripted import VERIFIED_TASK_POLICIES
from piexp.policies.rollout import EpisodeRecord
from piexp.sandbox.availability import SandboxDown
from piexp.sandbox.client import close_sandbox_clients, sandbox_client
from piexp.tasks import Task
from piexp.transcripts.failures import failure_cells, summarize_failures
from piexp.transcripts.store import CHECK_TRANSCRIPTS, TranscriptWriter


SAMPLED_POLICIES = ("guess", "crash", "wrong", "edit")
HELLO = "hello from piexp"
MISSING_RETURN_CODE = 127  # what the sandbox (like a shell) answers for a missing runtime


class CheckFailedError(UserError):
    """The preflight found a cell that is not solvable or a non-solution that is rewarded."""

    exit_code = 1


# Runtimes -------------------------------------------------------------------------------


async def probe_runtimes(config: RunConfig, sandbox_url: str) -> dict[str, dict[str, Any]]:
    """Hello world per configured language: 'ok', 'missing' (exit 127, command not
    found) or 'broken' (present but the hello world failed or the sandbox refused)."""
    client = sandbox_client(sandbox_url)

    async def probe(name: str) -> tuple[str, dict[str, Any]]:
        answered, response = await client.run(
            code=registered_language(name).print_statement(HELLO),
            files={},
            timeout=config.limits.sandbox_timeout_s,
            language=name,
        )
        if not answered:  # the sandbox's failure, not the runtime's: no verdict on it
            raise RunIncompleteError(
                f"The check could not probe the {name} runtime: {response.get('message')}. Nothing was judged; "
                "run the same command again once the sandbox is healthy."
            )
        result = response.get("run_result")
        if not isinstance(result, dict):
            detail = str(response.get("message") or response.get("error") or response)[:300]
            return name, {"status": "broken", "detail": f"sandbox error: {detail}"}
        code = result.get("return_code")
        stderr = str(result.get("stderr") or "").strip()
        if code == MISSING_RETURN_CODE:
            return name, {"status": "missing", "detail": stderr[:300] or "command not found"}
        if code == 0 and HELLO in str(result.get("stdout") or ""):
            return name, {"status": "ok", "detail": ""}
        return name, {"status": "broken", "detail": f"exit {code}: {stderr[:300]}"}

    return dict(await asyncio.gather(*(probe(name) for name in config.languages)))


def runtime_advice(name: str, info: dict[str, Any], config: RunConfig) -> str:
    """The fix for a runtime that failed its hello world, from what it died of: a memory
    limit too low is a memory limit too low, not a runtime to install."""
    detail = str(info.get("detail") or "")
    if "memory limit" in detail:
        return (
            f"sandbox.memory_limit_mb={config.sandbox.memory_limit_mb} is too low for {name} to start; "
            "raise it (the default is 1024)"
        )
    if "time limit" in detail or "timed out" in detail.lower():
        return f"{name} did not start within limits.sandbox_timeout_s={config.limits.sandbox_timeout_s}; raise it"
    return f"the run asks for {name} (lang/eval_lang): install it or drop it from the run"


def requested_languages(config: RunConfig) -> list[str]:
    """The languages the run's episodes will use (model eval needs only the eval split's)."""
    if config.mode.name == "eval":
        return list(config.eval_languages)
    return list(dict.fromkeys([*config.train_languages, *config.eval_languages]))


# Jobs and expectations ------------------------------------------------------------------


def check_settings(config: RunConfig) -> CheckMode:
    """`mode=check`'s settings; the preflight of another mode takes conf/mode/check.yaml's
    but runs as many episodes at once as that mode allows."""
    if isinstance(config.mode, CheckMode):
        return config.mode
    defaults = default_settings("mode", CheckMode, "check")
    if isinstance(config.mode, EvalMode):
        return defaults.model_copy(update={"max_concurrency": config.mode.max_concurrency})
    return defaults


def plan_episodes(config: RunConfig, splits: RunSplits, languages: Sequence[str]) -> list[Episode]:
    """Oracle on the first N tasks of each cell in each split (train tasks in the train
    languages, eval tasks in the eval languages: what the run will actually build), and
    each other policy on the first M tasks of the cell."""
    settings = check_settings(config)
    train_languages = set(config.train_languages) if config.mode.name != "eval" else set()
    eval_languages = set(config.eval_languages)
    episodes: list[Episode] = []
    for family in config.families:
        for language in languages:
            pool: list[Task] = []
            for split_tasks, split_languages in ((splits.train, train_languages), (splits.eval, eval_languages)):
                if language not in split_languages:
                    continue
                mine = [task for task in split_tasks if task.family == family]
                pool.extend(mine)
                episodes.extend(Episode("oracle", task, language) for task in mine[: settings.oracle_tasks_per_cell])
            for policy in SAMPLED_POLICIES:
                # A task graded by its own verifier is played by the policies that can
                # (its oracle, and `guess`: a no-op, which must score 0).
                episodes.extend(
                    Episode(policy, task, language)
                    for task in pool[: settings.sample_tasks_per_cell]
                    if task.verifier is None or policy in VERIFIED_TASK_POLICIES
                )
    return episodes


def expectation_violation(record: EpisodeRecord, answer_weight: float) -> str | None:
    """Why this episode breaks its policy's expectation, or None."""
    if record.error:
        return f"the rollout raised {record.error}"
    if record.metrics.get("infrastructure_error"):
        return "the sandbox reported an infrastructure error"
    binary, shaped = record.reward, record.shaped
    if record.policy in ("oracle", "edit"):
        if binary != 1.0:
            return f"expected binary reward 1.0, got {binary:g}"
    elif record.policy == "guess":
        allowed = answer_weight if record.metrics.get("response_answer_correct") else 0.0
        if binary != 0.0 or abs(shaped - allowed) > 1e-9:
            return f"expected binary 0 and shaped {allowed:g}, got binary {binary:g}, shaped {shaped:g}"
    elif record.policy in ("crash", "wrong"):
        if binary != 0.0 or shaped >= 0.5:
            return f"expected binary 0 and shaped < 0.5, got binary {binary:g}, shaped {shaped:g}"
    return None


def _describe(record: EpisodeRecord, problem: str) -> str:
    detail = [f"stop={record.stop_reason}", f"answer={record.answer}"]
    run = record.last_run or {}
    if run.get("return_code") not in (None, 0):
        detail.append(f"exit {run.get('return_code')}")
    for key in ("stderr", "error", "traceback"):
        if run.get(key):
            detail.append(f"{key}: {str(run[key]).strip()[-300:]}")
            break
    return (
        f"cell {record.family} x {record.language}: {record.policy} on task {record.task_id} "
        f"({record.split} split): {problem} ({'; '.join(detail)})"
    )


# The check ------------------------------------------------------------------------------


def run_check(config: RunConfig, run_dir: Path, sandbox_url: str, splits: RunSplits) -> float | None:
    """Run the whole check; write `check.json`; raise `CheckFailedError` on any violation.
    Returns the oracle's pass rate (1.0 when the check passes)."""
    return asyncio.run(_run_check(config, Path(run_dir), sandbox_url, splits))


async def _run_check(config: RunConfig, run_dir: Path, sandbox_url: str, splits: RunSplits) -> float:
    started = time.perf_counter()
    try:
        requested = requested_languages(config)
        runtimes = await probe_runtimes(config, sandbox_url)
        for name, info in runtimes.items():
            info["requested"] = name in requested
        violations: list[str] = []
        if not splits.overlap_report.get("ok", True):
            violations.append(f"train and eval splits overlap: {splits.overlap_report.get('counts')}")
        for name in requested:
            info = runtimes.get(name, {"status": "missing", "detail": "not configured"})
            if info["status"] != "ok":
                violations.append(
                    f"runtime {name} is {info['status']} in the sandbox ({info['detail']}); "
                    f"{runtime_advice(name, info, config)}"
                )
        runnable = [name for name in requested if runtimes.get(name, {}).get("status") == "ok"]
        settings = episode_settings(config, sandbox_url)
        renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
        tasks = [*splits.train, *splits.eval]
        policies = {name: make_policy(name, renderer, tasks) for name in ("oracle", *SAMPLED_POLICIES)}
        planned = plan_episodes(config, splits, runnable)
        harness = make_harness(config.harness)
        try:
            records = await run_episodes(
                planned,
                policies,
                settings,
                label=harness.progress_label("check"),
                max_concurrency=check_settings(config).max_concurrency,
                play=episode_play(config, harness.play, list(policies), tasks),
                retries=config.sandbox.episode_retries,
            )
        except SandboxDown as down:
            raise RunIncompleteError(
                f"The check stopped: {down}. No episode was judged on the sandbox's failure and no "
                f"check.json was written; run the same command again once the sandbox is healthy."
            ) from None
        finally:
            await harness.aclose()
        unrun = [record for record in records if record.infrastructure_failure]
        if unrun:
            raise RunIncompleteError(
                f"The check could not run {len(unrun)} of {len(planned)} episodes: the sandbox failed to run "
                f"their program {config.sandbox.episode_retries + 1} times each (first: {unrun[0].policy} on "
                f"{unrun[0].task_id} {unrun[0].language}: {unrun[0].error}). These are piexp's failures, not "
                "the tasks'; no check.json was written. Run the same command again once the sandbox is healthy."
            )
        weight = config.reward.weights.answer
        for record in records:
            problem = expectation_violation(record, weight)
            if problem:
                violations.append(_describe(record, problem))
        cells = _cells(config, requested, runtimes, records, weight)
        oracle = [r for r in records if r.policy == "oracle"]
        oracle_rate = sum(r.reward == 1.0 for r in oracle) / len(oracle) if oracle else 0.0
        report = {
            "harness": harness.identity(),
            "passed": not violations,
            "oracle_pass_rate": oracle_rate,
            "requested_languages": requested,
            "runtimes": runtimes,
            "overlap": splits.overlap_report,
            "cells": cells,
            "violations": violations,
            "tool_failures": {
                "overall": summarize_failures(r.failures for r in records),
                "cells": failure_cells(records, config.families, requested),
            },
            # Each with what it was checked for: met (None) or why not.
            "episodes": [{**r.to_json(), "expectation_violation": expectation_violation(r, weight)} for r in records],
            "wall_s": round(time.perf_counter() - started, 3),
        }
        run_dir.mkdir(parents=True, exist_ok=True)
        digests = {task.task_id: task.task_digest for task in tasks}
        with TranscriptWriter(run_dir / CHECK_TRANSCRIPTS) as transcripts:
            for record in records:
                if record.transcript is not None:
                    transcripts.write({**record.transcript, "task_digest": digests.get(record.task_id)})
        (run_dir / RunFolder.CHECK).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        from piexp.transcripts.viewer import write_run_viewer

        write_run_viewer(run_dir)
        if isinstance(config.mode, CheckMode) and config.mode.wandb_project:
            from piexp.launch.result_logging import check_tables, log_result

            metrics, tables = check_tables(report)
            files = [run_dir / RunFolder.VIEWER, run_dir / RunFolder.CHECK]
            log_result(run_dir, config.mode.wandb_project, run_dir.name, config.model_dump(mode="json"), metrics,
                       tables, files, "check", harness=harness.identity())  # fmt: skip
        say(_table(config, cells, runtimes))
        if violations:
            shown = violations[:5]
            more = f" (and {len(violations) - 5} more)" if len(violations) > 5 else ""
            raise CheckFailedError(
                f"The check failed with {len(violations)} violation(s){more}: "
                + " | ".join(shown)
                + f". Details in {run_dir / RunFolder.CHECK}."
            )
        say(
            f"[green]check passed[/green]: {len(records)} episodes, oracle {oracle_rate:.0%} "
            f"in {report['wall_s']:.1f} s; wrote {run_dir / RunFolder.CHECK}"
        )
        return oracle_rate
    finally:
        await close_sandbox_clients()


def _cells(
    config: RunConfig,
    requested: Sequence[str],
    runtimes: dict[str, dict[str, Any]],
    records: Sequence[EpisodeRecord],
    weight: float,
) -> dict[str, dict[str, Any]]:
    cells: dict[str, dict[str, Any]] = {}
    for family in config.families:
        cells[family] = {}
        for language in requested:
            mine = [r for r in records if r.family == family and r.language == language]
            if runtimes.get(language, {}).get("status") != "ok":
                cells[family][language] = {"status": f"runtime {runtimes.get(language, {}).get('status', 'missing')}"}
                continue
            per_policy: dict[str, dict[str, int]] = {}
            for record in mine:
                counts = per_policy.setdefault(record.policy, {"ok": 0, "total": 0})
                counts["total"] += 1
                counts["ok"] += expectation_violation(record, weight) is None
            failed = any(c["ok"] != c["total"] for c in per_policy.values())
            cells[family][language] = {"status": "fail" if failed else "ok", "policies": per_policy}
    return cells


def _table(config: RunConfig, cells: dict[str, dict[str, Any]], runtimes: dict[str, dict[str, Any]]) -> Table:
    languages = list(next(iter(cells.values())).keys()) if cells else []
    table = Table(
        title="piexp check: family x language (episodes meeting expectations)",
        caption="runtimes: "
        + ", ".join(
            f"{name} {info['status']}" + ("" if info.get("requested") else " (not requested)")
            for name, info in runtimes.items()
        ),
    )
    table.add_column("family")
    for language in languages:
        table.add_column(f"{language} ({runtimes.get(language, {}).get('status', '?')})")
    for family, row in cells.items():
        texts = []
        for language in languages:
            cell = row[language]
            if "policies" not in cell:
                texts.append(f"[yellow]{cell['status']}[/yellow]")
                continue
            oracle = cell["policies"].get("oracle", {"ok": 0, "total": 0})
            others = [c for name, c in cell["policies"].items() if name != "oracle"]
            ok = sum(c["ok"] for c in others)
            total = sum(c["total"] for c in others)
            colour = "green" if cell["status"] == "ok" else "red"
            texts.append(f"[{colour}]oracle {oracle['ok']}/{oracle['total']}, others {ok}/{total}[/{colour}]")
        table.add_row(family, *texts)
    return table
