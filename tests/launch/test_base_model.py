"""A training run records the base model it trained (manifest `base_model`), and an
evaluation of `checkpoint=<that run>` on another base model, e.g. a `learner-local`
rebuilt since, is refused with one paragraph before anything is written or built; so is
a rerun that would resume a run on another base model (the run-folder guard counts it
as another run: `--replace` moves the folder aside)."""

from __future__ import annotations

import json
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
from tests.job_launcher import run_piexp

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
    result = run_piexp(*EVAL, f"checkpoint={older}", f"hydra.run.dir={out}", timeout=120)
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())  # the paragraph is wrapped to the terminal
    assert "was trained on the base model learner-local/0000000000000000" in message
    assert "Traceback" not in message
    assert not (out / "job.log").exists() and not (out / MANIFEST_NAME).exists()


def _held_run(folder: Path, overrides: list[str], base_model: str | None) -> None:
    from omegaconf import OmegaConf

    (folder / ".hydra").mkdir(parents=True)
    held = load(overrides).model_dump(mode="json")
    (folder / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(held)))
    manifest = {"mode": held["mode"]["name"]} | ({BASE_MODEL_KEY: base_model} if base_model else {})
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


TRAIN = ["experiment=learn_offline"]


def test_resuming_a_run_on_another_base_model_is_another_run(tmp_path: Path) -> None:
    from piexp.launch.folder_guard import folder_conflict

    expected = expected_base_model(load(TRAIN))
    same, older, unrecorded = tmp_path / "same", tmp_path / "older", tmp_path / "unrecorded"
    _held_run(same, TRAIN, expected)
    _held_run(older, TRAIN, "learner-local/0000000000000000")
    _held_run(unrecorded, TRAIN, None)
    assert folder_conflict(same, load(TRAIN)) is None
    assert folder_conflict(unrecorded, load(TRAIN)) is None  # a run from before piexp recorded it
    why = folder_conflict(older, load(TRAIN))
    assert why is not None and f"learner-local/0000000000000000 -> {expected}" in why
    # An evaluation of the model policy resumes its episodes on the model: refused too; a
    # scripted evaluation samples no model, so its base model does not matter.
    model_eval, scripted = tmp_path / "model-eval", tmp_path / "scripted"
    _held_run(model_eval, EVAL, "learner-local/0000000000000000")
    _held_run(scripted, [*EVAL[:2], "policy=oracle"], "learner-local/0000000000000000")
    assert "its base model differs" in (folder_conflict(model_eval, load(EVAL)) or "")
    assert folder_conflict(scripted, load([*EVAL[:2], "policy=oracle"])) is None


def test_the_command_line_refuses_to_resume_on_another_base_model(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _held_run(run, TRAIN, "learner-local/0000000000000000")
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    result = run_piexp(*TRAIN, f"hydra.run.dir={run}", timeout=120)
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert "already holds a different run" in message and "its base model differs" in message, message
    assert "--replace" in message and "Traceback" not in message
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before
