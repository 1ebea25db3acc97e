"""mode=train: tinker-cookbook's RL loop over the Pi workspace environment."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from piexp.config.schema import RunConfig, TrainMode
from piexp.run_folder import RunFolder

# Fields of rl.train.Config that no config option sets, and why (tests/launch/
# test_rl_options.py fails on any other field that is not reachable from config):
PIEXP_SET_FIELDS = {
    "dataset_builder": "piexp's RecordingDatasetBuilder (tasks, splits, sandbox URL and run folder from the run)",
    "recipe_name": "always piexp_pi_workspace: names piexp's recipe to the service",
    "log_path": "the run folder",
    "evaluator_builders": "none: the eval split comes from the dataset builder (mode.eval_every)",
    "load_checkpoint_path": "the warm start's checkpoint (warm_start.sft_steps), else none",
    "wandb_name": "the run folder's name and the harness with its version, when mode.wandb_project is set",
    "session_name": "left to the cookbook (it uses wandb_name)",
    "base_url": "service.base_url, resolved at run time for local and selfhosted services",
}


def cookbook_config(config: RunConfig, run_dir: Path, sandbox_url: str, load_checkpoint_path: str | None = None) -> Any:
    """The tinker-cookbook `rl.train.Config` for this run. Its log path is the run folder;
    the loop resumes from the last checkpoint there by itself (never interactively)."""
    from tinker_cookbook.rl import train as rl_train

    from piexp.launch.result_logging import wandb_run_name
    from piexp.launch.train_transcripts import RecordingDatasetBuilder
    from piexp.env.rollout_policy import rollout_error_tolerance, termination_policy

    mode, algo = config.mode, config.algo
    assert isinstance(mode, TrainMode)
    kl_reference = None
    if algo.kl_penalty_coef > 0:
        kl_reference = rl_train.KLReferenceConfig(
            base_model=algo.kl_reference_config.base_model or config.model.name,
            load_checkpoint_path=algo.kl_reference_config.load_checkpoint_path,
        )
    off_policy = algo.async_config.max_steps_off_policy
    minibatches = algo.stream_minibatch_config.num_minibatches
    return rl_train.Config(
        learning_rate=config.model.learning_rate,
        dataset_builder=RecordingDatasetBuilder(
            config_json=config.model_dump_json(), sandbox_url=sandbox_url, run_dir=str(run_dir)
        ),
        model_name=config.model.name,
        recipe_name="piexp_pi_workspace",
        renderer_name=config.model.renderer,
        max_tokens=config.limits.max_generation_tokens,
        temperature=config.model.temperature,
        lora_rank=config.model.lora_rank,
        log_path=str(run_dir),
        eval_every=mode.eval_every,
        save_every=mode.save_every,
        max_steps=mode.max_steps,
        wandb_project=mode.wandb_project,
        wandb_name=wandb_run_name(run_dir.name, RunFolder(run_dir).harness()) if mode.wandb_project else None,
        base_url=config.service.base_url,
        load_checkpoint_path=load_checkpoint_path,
        loss_fn=algo.loss_fn,
        loss_fn_config=algo.loss_fn_config.as_dict(),
        num_substeps=algo.num_substeps,
        kl_penalty_coef=algo.kl_penalty_coef,
        kl_discount_factor=algo.kl_discount_factor,
        kl_reference_config=kl_reference,
        compute_post_kl=algo.compute_post_kl,
        # The binary gate drops its groups through the cookbook's filter of equal totals.
        remove_constant_reward_groups=algo.remove_constant_reward_groups or algo.binary_gate,
        rollout_error_tolerance=rollout_error_tolerance(algo, config.sandbox.episode_retries, mode.group_size),
        termination=termination_policy(algo),
        async_config=(
            rl_train.AsyncConfig(max_steps_off_policy=off_policy, groups_per_batch=mode.groups_per_batch)
            if off_policy is not None
            else None
        ),
        stream_minibatch_config=(
            rl_train.StreamMinibatchConfig(groups_per_batch=mode.groups_per_batch, num_minibatches=minibatches)
            if minibatches is not None
            else None
        ),
        rolling_save_every=algo.rolling_save_every,
        ttl_seconds=algo.ttl_seconds,
        rolling_ttl_seconds=algo.rolling_ttl_seconds,
        num_groups_to_log=algo.num_groups_to_log,
        rollout_json_export=algo.rollout_json_export,
        enable_trace=algo.enable_trace,
        span_chart_every=algo.span_chart_every,
    )


def control_metrics(run_dir: Path, step: int) -> dict[str, float]:
    """Step `step`'s metrics of the run's online controls (`TrainingControls`), for its row
    of metrics.jsonl: none before the run's dataset exists."""
    from piexp.env.task_sampler import TrainingControls

    controls = TrainingControls.of(str(run_dir))
    return controls.step_metrics(step) if controls is not None else {}


class _NoTrajectoryDumps:
    """Drops the cookbook's per-iteration token dumps of two trajectory groups (hundreds
    of lines on the terminal); the same rollouts are in each iteration's train.html."""

    def filter(self, record: Any) -> bool:
        return not str(record.msg).lstrip().startswith("====== Trajectory Group")


def run_train(config: RunConfig, run_dir: Path, sandbox_url: str) -> None:
    import logging

    from piexp.console import ProgressReport, say
    from piexp.launch.step_lines import COOKBOOK_TABLE_LOGGER, show_steps_as_lines

    from tinker_cookbook.rl import train as rl_train

    logging.getLogger(rl_train.__name__).addFilter(_NoTrajectoryDumps())

    from piexp.cookbook_compat import extra_step_metrics
    from piexp.harness.base import close_run_harnesses
    from piexp.env.task_sampler import TrainingControls
    from piexp.launch.ray_rollouts import group_executor
    from piexp.launch.rl_record import write_rl_record
    from piexp.launch.train_transcripts import TrainRecorder
    from piexp.transcripts.store import TRAIN_TRANSCRIPTS
    from piexp.sandbox.client import close_sandbox_clients

    async def _train() -> None:
        from piexp.launch.warm_start import warm_start, write_summary

        try:
            start_from = await warm_start(config, run_dir, sandbox_url) if config.warm_start.sft_steps else None
            train_config = cookbook_config(config, run_dir, sandbox_url, start_from)
            write_rl_record(run_dir, train_config)
            # A line at least every PLAIN_PROGRESS_EVERY_S seconds, and one a step.
            assert isinstance(config.mode, TrainMode)
            with ProgressReport("training", config.mode.max_steps, unit="steps", live=False) as progress:
                lines = show_steps_as_lines(run_dir, progress)
                try:
                    executor = group_executor(config)  # rollouts=ray: each group on a node

                    def step_metrics(step: int) -> dict[str, float]:
                        rollouts = executor.ledger.step_metrics(step) if executor is not None else {}
                        return {**control_metrics(run_dir, step), **rollouts}

                    with extra_step_metrics(step_metrics):
                        await rl_train.main(train_config, rollout_executor=executor)
                finally:
                    logging.getLogger(COOKBOOK_TABLE_LOGGER).removeFilter(lines)
            write_summary(run_dir)
            from piexp.transcripts.viewer import write_run_viewer

            write_run_viewer(run_dir)  # the reward curve, and links to the cookbook's per-iteration pages
            say(
                f"wrote {run_dir / RunFolder.METRICS}, {RunFolder.SUMMARY}, {RunFolder.TRAIN_TRANSCRIPTS}, "
                f"{RunFolder.VIEWER} and the checkpoints ({RunFolder.CHECKPOINTS})"
            )
        finally:
            await close_run_harnesses()
            await close_sandbox_clients()
            TrainRecorder.close(str(run_dir / TRAIN_TRANSCRIPTS))
            TrainingControls.forget(str(run_dir))

    import tinker

    from piexp.errors import RunIncompleteError
    from piexp.sandbox.availability import SandboxDown

    resume = (
        f"The run is not marked complete; run the same command with hydra.run.dir={run_dir} to resume from its "
        "last checkpoint."
    )
    try:
        asyncio.run(_train())
    except SandboxDown as down:
        raise RunIncompleteError(
            f"Training stopped: {down}. No episode was scored or trained on for the sandbox's failure. {resume}"
        ) from None
    except tinker.TinkerError as error:  # what the SDK raises once its own retries are spent
        raise RunIncompleteError(
            f"Training stopped: a call to the model service (service={config.service.name}, "
            f"{config.service.base_url or 'Tinker'}) failed: {type(error).__name__}: {error}. {resume}"
        ) from None
