"""`checkpoint=` names a tinker:// sampler path or a training run folder: the folder's
last recorded sampler checkpoint is used (and, for service=local, that run's server
state); a folder that has none is one clear error before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piexp.config.argv import rewrite_list_overrides
from piexp.config.compose import load
from piexp.errors import UserError
from piexp.checkpoint_source import CHECKPOINTS_FILE, resolve_checkpoint
from piexp.service import _state_dir


def _run_folder(tmp_path: Path, rows: list[dict], tail: str = "") -> Path:
    run = tmp_path / "train-run"
    run.mkdir()
    text = "".join(json.dumps(row) + "\n" for row in rows) + tail
    (run / CHECKPOINTS_FILE).write_text(text)
    return run


def test_a_tinker_path_is_used_as_given() -> None:
    source = resolve_checkpoint("tinker://model/sampler_weights/final")
    assert source.sampler_path == "tinker://model/sampler_weights/final" and source.run_dir is None


def test_a_run_folder_gives_its_last_sampler_checkpoint(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, [
        {"name": "000001", "batch": 1, "state_path": "tinker://m/weights/000001", "sampler_path": "tinker://m/sampler_weights/000001"},
        {"name": "000002", "batch": 2, "state_path": "tinker://m/weights/000002"},
        {"name": "final", "batch": 3, "state_path": "tinker://m/weights/final", "sampler_path": "tinker://m/sampler_weights/final"},
    ], tail='{"name": "cut sh')  # fmt: skip
    source = resolve_checkpoint(str(run))
    assert source.sampler_path == "tinker://m/sampler_weights/final"
    assert source.run_dir == run.resolve()


def test_local_eval_of_a_run_folder_serves_that_runs_state(tmp_path: Path) -> None:
    run = _run_folder(tmp_path, [{"name": "final", "sampler_path": "tinker://m/sampler_weights/final"}])
    config = load(rewrite_list_overrides(
        ["mode=eval", "policy=model", "service=local", "model=tiny-local", f"checkpoint={run}"]))  # fmt: skip
    assert _state_dir(config, tmp_path / "eval-run") == run.resolve() / "local_service"
    base = load(rewrite_list_overrides(["mode=eval", "policy=model", "service=local", "model=tiny-local"]))
    assert _state_dir(base, tmp_path / "eval-run") == tmp_path / "eval-run" / "local_service"


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda tmp: tmp / "missing", "neither"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", f"without {CHECKPOINTS_FILE}"),
        (
            lambda tmp: _run_folder(tmp, [{"name": "000001", "state_path": "tinker://m/weights/1"}]),
            "no sampler checkpoint",
        ),
    ],
    ids=["missing", "no record", "no sampler path"],
)
def test_a_folder_without_a_sampler_checkpoint_is_one_clear_error(tmp_path: Path, make, fragment: str) -> None:  # type: ignore[no-untyped-def]
    folder = make(tmp_path)
    with pytest.raises(UserError) as caught:
        load(rewrite_list_overrides(["mode=eval", "policy=model", f"checkpoint={folder}"]))
    assert fragment in str(caught.value) and caught.value.exit_code == 2
