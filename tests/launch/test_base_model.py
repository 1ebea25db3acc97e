"""A training run records the base model it trained (manifest `base_model`), and an
evaluation of `checkpoint=<that run>` on another base model, e.g. a `learner-local`
rebuilt since, is refused with one paragraph before anything is written or built."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from piexp.config.compose import load
from piexp.errors import UserError
from piexp.checkpoint_source import CHECKPOINTS_FILE
from piexp.launch.base_model import (
    BASE_MODEL_KEY,
    base_model_identity,
    expected_base_model,
    refuse_checkpoint_of_another_base_model,
)
from piexp.launch.manifest import MANIFEST_NAME

EVAL = ["experiment=learn_offline", "mode=eval", "policy=model"]


def _training_run(tmp_path: Path, base_model: str | None) -> Path:
    run = tmp_path / "train-run"
    run.mkdir(parents=True)
    row = {"name": "final", "batch": 8, "sampler_path": "tinker://m/sampler_weights/final"}
    (run / CHECKPOINTS_FILE).write_text(json.dumps(row) + "\n")
    manifest = {"mode": "train"} | ({BASE_MODEL_KEY: base_model} if base_model else {})
    (run / MANIFEST_NAME).write_text(json.dumps(manifest))
    return run


def test_identity_of_a_local_folder_is_its_models_subfolder_and_name() -> None:
    assert base_model_identity("/root/.cache/piexp/models/learner-local/3a40") == "learner-local/3a40"
    assert base_model_identity("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"


def test_the_same_base_model_passes_another_is_refused(tmp_path: Path) -> None:
    expected = expected_base_model(load(EVAL))
    assert expected.startswith("learner-local/") and len(expected) > len("learner-local/")
    same = _training_run(tmp_path / "a", expected)
    refuse_checkpoint_of_another_base_model(load([*EVAL, f"checkpoint={same}"]))
    older = _training_run(tmp_path / "b", "learner-local/0000000000000000")
    with pytest.raises(UserError, match="learner-local/0000000000000000.*" + expected):
        refuse_checkpoint_of_another_base_model(load([*EVAL, f"checkpoint={older}"]))


def test_a_run_that_recorded_no_base_model_is_not_refused(tmp_path: Path) -> None:
    run = _training_run(tmp_path, None)
    refuse_checkpoint_of_another_base_model(load([*EVAL, f"checkpoint={run}"]))


def test_the_command_line_refuses_before_writing_or_building(tmp_path: Path) -> None:
    older = _training_run(tmp_path, "learner-local/0000000000000000")
    out = tmp_path / "eval-run"
    result = subprocess.run(
        [sys.executable, "-m", "piexp", *EVAL, f"checkpoint={older}", f"hydra.run.dir={out}"],
        capture_output=True,
        text=True,
        timeout=120,  # a build of the model would take many minutes
    )
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())  # the paragraph is wrapped to the terminal
    assert "was trained on the base model learner-local/0000000000000000" in message
    assert "Traceback" not in message
    assert not (out / "job.log").exists() and not (out / MANIFEST_NAME).exists()
