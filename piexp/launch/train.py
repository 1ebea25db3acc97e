"""mode=train: tinker-cookbook's RL loop over the Pi workspace environment."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from piexp.config.schema import RunConfig, TrainMode


def cookbook_config(
    config: RunConfig, run_dir: Path, sandbox_url: str, load_checkpoint_path: str | None = None
) -> Any:
    """The tinker-cookbook `rl.train.Config` for this run. Its log path is the run folder;
    the loop resumes from the last checkpoint there by itself (never interactively)."""
    from tinker_cookbook.rl import train as rl_train

    from piexp.env.dataset import WorkspaceDatasetBuilder

    mode = config.mode
    assert isinstance(mode, TrainMode)
    return rl_train.Config(
        learning_rate=config.model.learning_rate,
        dataset_builder=WorkspaceDatasetBuilder(
            config_json=config.model_dump_json(), sandbox_url=sandbox_url
        ),
        model_name=config.model.name,
        recipe_name="piexp_pi_workspace",
        renderer_name=config.model.renderer,
        max_tokens=config.limits.max_generation_tokens,
        temperature=config.model.temperature,
        lora_rank=config.model.lora_rank,
        loss_fn=mode.loss_fn,
        log_path=str(run_dir),
        eval_every=mode.eval_every,
        save_every=mode.save_every,
        wandb_project=mode.wandb_project,
        wandb_name=run_dir.name if mode.wandb_project else None,
        base_url=config.service.base_url,
        load_checkpoint_path=load_checkpoint_path,
    )


def run_train(config: RunConfig, run_dir: Path, sandbox_url: str) -> None:
    from tinker_cookbook.rl import train as rl_train

    from piexp.sandbox.client import close_sandbox_clients

    async def _train() -> None:
        from piexp.launch.warm_start import warm_start, write_summary

        try:
            start_from = await warm_start(config, run_dir, sandbox_url) if config.warm_start.sft_steps else None
            await rl_train.main(cookbook_config(config, run_dir, sandbox_url, start_from))
            write_summary(run_dir)
        finally:
            await close_sandbox_clients()

    asyncio.run(_train())
