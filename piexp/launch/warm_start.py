"""Warm start (`warm_start.sft_steps=N`): imitate the oracle before RL.

A tiny or weak model gets reward 0 on every sample, so RL sees no reward variance and
learns nothing. Before RL, the scripted `oracle` policy is rolled out through the real
renderer, tools and sandbox on the first `warm_start.tasks` train tasks; its
trajectories become supervised data (exactly the tokens an episode sees: observations
masked out, the oracle's actions weighted 1, via tinker-cookbook's
`trajectory_to_data`), and N cross-entropy steps run on a fresh LoRA training client.
The resulting state is saved and RL starts from those weights (tinker-cookbook's
`load_checkpoint_path`: weights only, fresh optimizer).

Resumable: `warm_start.json` in the run folder records the saved state; a rerun reuses
it instead of training again (and once RL has a checkpoint, the RL loop resumes from
that instead). `summary.md` reports whether reward changed beyond noise (`write_summary`).
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import json
import time
from pathlib import Path
from typing import Any

from piexp.config.schema import RunConfig
from piexp.console import ProgressReport, say
from piexp.run_records import (
    TRAIN_ROLLOUTS_SPLIT,
    control_rows,
    controls_table,
    finite_number,
    metric_curve,
    train_pass_curve,
)
from piexp.stats import difference_ci95, share_ci95

WARM_START_FILE = RunFolder.WARM_START
SUMMARY_FILE = RunFolder.SUMMARY


def _sft_datums(trajectories: list[Any]) -> list[Any]:
    import tinker
    from tinker_cookbook.rl.data_processing import trajectory_to_data

    datums = []
    for trajectory in trajectories:
        for datum in trajectory_to_data(trajectory, 1.0):
            datums.append(
                tinker.Datum(
                    model_input=datum.model_input,
                    loss_fn_inputs={
                        "target_tokens": datum.loss_fn_inputs["target_tokens"],
                        "weights": datum.loss_fn_inputs["mask"],
                    },
                )
            )
    return datums


async def _sft_step(
    training_client: Any, datums: list[Any], learning_rate: float, step: int, tokens: int
) -> dict[str, Any]:
    """One cross-entropy step on all `datums`: its mean NLL per weighted token, the
    optimizer's metrics, its wall time and tokens trained per second."""
    import tinker

    started = time.monotonic()
    backward = training_client.forward_backward(datums, "cross_entropy")
    optim = training_client.optim_step(tinker.AdamParams(learning_rate=learning_rate))
    result = await backward.result_async()
    optim_result = await optim.result_async()
    seconds = time.monotonic() - started
    weights = sum(sum(d.loss_fn_inputs["weights"].tolist()) for d in datums)
    loss_sum = float(result.metrics.get("loss:sum", float("nan")))
    if loss_sum != loss_sum:  # no loss metric: compute the mean NLL from the logprobs
        total = 0.0
        for datum, output in zip(datums, result.loss_fn_outputs, strict=True):
            logprobs = output["logprobs"].tolist()
            total += -sum(lp * w for lp, w in zip(logprobs, datum.loss_fn_inputs["weights"].tolist(), strict=True))
        loss_sum = total
    return {"step": step, "nll": loss_sum / max(weights, 1.0), "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / max(seconds, 1e-9), 1), **(optim_result.metrics or {})}  # fmt: skip


async def oracle_trajectories(config: RunConfig, sandbox_url: str) -> tuple[list[Any], list[float]]:
    """Episodes of `warm_start.policy` (trajectories, rewards) on the first
    `warm_start.tasks` train tasks, cycling through the run's train languages, played as
    the run's harness plays them (`Harness.warm_start_trajectories`)."""
    from piexp.env.splits import build_splits
    from piexp.harness.base import run_harness

    tasks = list(build_splits(config).train)[: config.warm_start.tasks]
    return await run_harness(config.harness).warm_start_trajectories(config, sandbox_url, tasks)


async def warm_start(config: RunConfig, run_dir: Path, sandbox_url: str) -> str | None:
    """Run the SFT steps (unless done or RL already checkpointed) and return the saved
    state's `tinker://` path for RL to start from."""
    import tinker
    from tinker_cookbook import checkpoint_utils

    record_path = run_dir / WARM_START_FILE
    if record_path.is_file():
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if record.get("state_path"):
            say(f"warm start: reusing {record['state_path']} from {record_path.name}")
            return str(record["state_path"])
    if checkpoint_utils.get_last_checkpoint(str(run_dir)):
        return None  # RL already has a checkpoint to resume from

    settings = config.warm_start
    started = time.monotonic()
    trajectories, rewards = await oracle_trajectories(config, sandbox_url)
    datums = _sft_datums(trajectories)
    if not datums:
        raise RuntimeError("warm start: the oracle produced no trajectories to imitate")
    service_client = tinker.ServiceClient(base_url=config.service.base_url)
    user_metadata: dict[str, str] = {}
    checkpoint_utils.add_renderer_name_to_user_metadata(user_metadata, config.model.renderer)
    training_client = await service_client.create_lora_training_client(
        config.model.name, rank=config.model.lora_rank, user_metadata=user_metadata
    )
    learning_rate = settings.learning_rate or config.model.learning_rate
    steps: list[dict[str, Any]] = []
    tokens = sum(datum.model_input.length for datum in datums)
    label = f"warm start: SFT on {len(datums)} sequences, {tokens} tokens"
    with ProgressReport(label, settings.sft_steps, unit="steps") as progress:
        for step in range(settings.sft_steps):
            steps.append(await _sft_step(training_client, datums, learning_rate, step, tokens))
            progress.advance(note=f"nll {steps[-1]['nll']:.4f}")
    saved = await training_client.save_state("warm_start")
    record = {
        "state_path": saved.path,
        "sft_steps": settings.sft_steps,
        "policy": settings.policy,
        "episodes": len(trajectories),
        "datums": len(datums),
        "tokens": tokens,
        "oracle_mean_reward": sum(rewards) / len(rewards),
        "steps": steps,
        "wall_s": round(time.monotonic() - started, 1),
    }
    record_path.write_text(json.dumps(record, indent=2), encoding="utf-8")
    return str(saved.path)


# --------------------------------------------------------------------------- summary


def reward_trend(run_dir: Path, series: list[tuple[int, float]]) -> str:
    """Whether the training reward changed from the first iteration to the last beyond
    noise: the difference of the two batches' mean episode rewards with its 95% Welch
    interval (each batch's episodes from its exported rollouts). A change is claimed only
    when the interval excludes zero."""
    (first, start), (last, end) = series[0], series[-1]
    if first == last:
        return f"One iteration logged ({first}): no trend to claim yet."

    def rewards(step: int) -> list[float]:
        values = (finite_number(t.get("total_reward")) for t in RunFolder(run_dir).rollouts(TRAIN_ROLLOUTS_SPLIT, step))
        return [v for v in values if v is not None]

    before, after = rewards(first), rewards(last)
    span = f"{start:.4f} (iteration {first}) -> {end:.4f} (iteration {last})"
    if not before or not after:
        return f"Reward {span}; the batches' episode rewards were not exported (algo.rollout_json_export), so no trend is claimed."
    difference, half = difference_ci95(before, after)
    if half is None:
        return f"Reward {span}; too few episodes for an interval, so no trend is claimed."
    measured = f"difference {difference:+.4f} ± {half:.4f}, 95% interval over {len(before)} and {len(after)} episodes"
    if difference - half > 0:
        return f"Reward rose beyond noise: {span} ({measured})."
    if difference + half < 0:
        return f"Reward fell beyond noise: {span} ({measured})."
    return f"No change beyond noise: reward {span} ({measured})."


def write_summary(run_dir: Path) -> str:
    """`summary.md`: warm start (if any), the RL reward per iteration with whether it
    changed beyond noise (`reward_trend`), the eval split's pass@1 per periodic eval with
    its interval, and the online controls per iteration (informative
    groups, groups the binary gate dropped, pool sizes, levels) where metrics.jsonl has them."""
    lines = ["# Run summary", ""]
    record_path = run_dir / WARM_START_FILE
    if record_path.is_file():
        record = json.loads(record_path.read_text(encoding="utf-8"))
        nll = [step["nll"] for step in record.get("steps", [])]
        lines += [
            f"## Warm start ({record['sft_steps']} SFT steps on {record['episodes']} {record['policy']} episodes)",
            "",
            f"- oracle mean reward on its episodes: {record['oracle_mean_reward']:.3f}",
            f"- NLL per action token: {' -> '.join(f'{v:.4f}' for v in nll)}" if nll else "- no steps recorded",
            f"- saved state: `{record['state_path']}`",
            "",
        ]
    rows = RunFolder(run_dir).metrics()
    series = metric_curve(rows, "reward")
    lines += ["## RL reward per iteration", ""]
    if series:
        lines += ["| iteration | mean reward |", "| --- | --- |"]
        lines += [f"| {step} | {reward:.4f} |" for step, reward in series]
        lines += ["", reward_trend(run_dir, series)]
    else:
        lines += ["No RL iteration logged yet."]
    passes = train_pass_curve(run_dir, rows)
    if passes:
        lines += ["", "## pass@1 on the eval split per periodic eval", ""]
        lines += ["| iteration | pass@1 | 95% interval | episodes |", "| --- | --- | --- | --- |"]
        for point in passes:
            half = None if point.episodes is None else share_ci95(point.rate, point.episodes)
            interval = "-" if half is None else f"± {half:.3f}"
            lines.append(f"| {point.step} | {point.rate:.3f} | {interval} | {point.episodes or '-'} |")
    controls = control_rows(rows)
    if controls:  # informative groups per step, and what the online controls did (piexp.env.task_sampler)
        lines += ["", "## Online controls per iteration", "", *controls_table(controls)]
    text = "\n".join(lines) + "\n"
    (run_dir / SUMMARY_FILE).write_text(text, encoding="utf-8")
    return text
