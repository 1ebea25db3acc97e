"""mode=train hands tinker-cookbook a complete, serialisable rl.train.Config built from
the run config (no service is contacted here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import chz

from piexp.config.argv import rewrite_list_overrides
from piexp.config.compose import load
from piexp.env.group_outcomes import workspace_group
from piexp.launch.train import cookbook_config


def test_cookbook_config_mirrors_the_run_config(tmp_path: Path) -> None:
    config = load(
        rewrite_list_overrides(
            [
                "family=arith",
                "lang=python,javascript",
                "model=qwen3-8b",
                "model.learning_rate=1e-5",
                "model.lora_rank=8",
                "mode.group_size=3",
                "mode.groups_per_batch=2",
                "mode.max_steps=5",
                "mode.eval_every=2",
                "mode.save_every=4",
                "limits.max_generation_tokens=1024",
                "service.base_url=http://127.0.0.1:9999",
                "algo.loss_fn=ppo",
            ]
        )
    )
    cfg = cookbook_config(config, tmp_path, "http://127.0.0.1:8080/run_code")
    assert cfg.model_name == "Qwen/Qwen3-8B" and cfg.renderer_name == "qwen3"
    assert (cfg.learning_rate, cfg.lora_rank, cfg.max_tokens) == (1e-5, 8, 1024)
    assert (cfg.eval_every, cfg.save_every, cfg.loss_fn) == (2, 4, "ppo")
    assert cfg.log_path == str(tmp_path) and cfg.base_url == "http://127.0.0.1:9999"
    assert cfg.wandb_project is None
    assert chz.replace(cfg) == cfg
    train, evaluation = asyncio.run(cfg.dataset_builder())
    assert len(train) == 5 and len(train.get_batch(0)) == 2
    # Each group is recorded (train_transcripts.jsonl.gz, group_outcomes.jsonl) around piexp's workspace group.
    assert all(group.step == 0 and workspace_group(group).group_size == 3 for group in train.get_batch(0))
    assert evaluation is not None and all(group.evaluation for group in evaluation.get_batch(0))


def test_trajectory_dumps_stay_off_the_terminal() -> None:
    """The cookbook logs two trajectory groups' tokens every iteration; piexp's filter
    drops exactly those records (the header is checked against the pinned cookbook)."""
    import inspect
    import logging

    from tinker_cookbook.rl import train as rl_train

    from piexp.launch.train import _NoTrajectoryDumps

    assert 'bprint("\\n====== Trajectory Group ======")' in inspect.getsource(rl_train.print_group)
    dump = logging.LogRecord(
        rl_train.__name__, logging.INFO, "", 0, "\n====== Trajectory Group ======\n...", None, None
    )
    other = logging.LogRecord(rl_train.__name__, logging.INFO, "", 0, "Will train on 2 batches", None, None)
    assert not _NoTrajectoryDumps().filter(dump)
    assert _NoTrajectoryDumps().filter(other)
