"""The researcher's loop in one command, end to end on `service=local model=tiny-local`
at the smallest scale: base evaluation, one RL step, evaluation of the run's final
checkpoint (loaded into a fresh server on the run's state) and the comparison in the run
folder; a loop stopped during its trained evaluation resumes there. No account, no
network (once the server venv exists). About 4-6 minutes on 2 CPU cores."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from piexp.launch.base_model import base_model_identity

from piexp.sweeps.marker import MARKER_PATH
from piexp.transcripts.store import TRAIN_TRANSCRIPTS, read_transcripts
from tests.job_launcher import run_piexp

pytestmark = pytest.mark.slow

OVERRIDES = [
    "service=local", "model=tiny-local", "family=arith", "lang=python",
    "tasks.train_per_family=2", "tasks.eval_per_family=2",
    "mode.group_size=2", "mode.groups_per_batch=1", "mode.max_steps=1", "mode.save_every=0", "mode.eval_every=0",
    "mode.preflight=false", "limits.max_turns=2", "limits.max_generation_tokens=64",
    "mode.eval_before=true", "mode.eval_after=true",
]  # fmt: skip


def _loop(run_dir: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}  # no key needed
    result = run_piexp(*OVERRIDES, f"hydra.run.dir={run_dir}", env=env, timeout=1200)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return result.stdout + result.stderr


def test_the_loop_evaluates_trains_evaluates_the_final_checkpoint_and_compares(
    server_venv: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """Slow (minutes): a base eval, an RL step and an eval of the trained checkpoint, each
    through a real local server, then the loop rerun as if stopped during its trained eval."""
    run_dir = tmp_path / "run"
    _loop(run_dir)
    base, trained = (
        json.loads((run_dir / name / "results.json").read_text()) for name in ("eval_base", "eval_trained")
    )
    assert base["checkpoint"] is None and base["overall"]["episodes"] == 2
    assert trained["checkpoint"] == str(run_dir) and trained["overall"]["episodes"] == 2
    # The trained evaluation sampled the run's final checkpoint, loaded into its server.
    rows = [json.loads(line) for line in (run_dir / "checkpoints.jsonl").read_text().splitlines() if line.strip()]
    final = rows[-1]
    assert (final["name"], final["batch"]) == ("final", 1)
    record = json.loads((run_dir / "loop.json").read_text())
    assert record["eval_trained"]["state_path"] == final["state_path"]
    assert record["eval_trained"]["sampler_path"] == final["sampler_path"]
    assert "Loaded training checkpoint" in (run_dir / "local_service" / "server.log").read_text()
    # The run records the base model its checkpoints belong to (an eval on another is refused).
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["base_model"] == base_model_identity(str(tiny_model)) == "models/tiny-local"
    comparison = (run_dir / "compare.md").read_text()
    assert "eval_base" in comparison and "eval_trained" in comparison and (run_dir / "compare.png").is_file()
    assert json.loads((run_dir / "compare.json").read_text())["overall"]["tasks"] == 2
    # The RL step recorded the episodes it trained on, sampled by the real model.
    trained_on = list(read_transcripts(run_dir / TRAIN_TRANSCRIPTS))
    assert [(t["iteration"], t["group"], t["sample"]) for t in trained_on] == [(0, 0, 0), (0, 0, 1)]
    assert all(t["policy"] == "model" and t["conversation"] for t in trained_on)

    # A loop stopped during its trained evaluation (no completion marker, no results yet)
    # resumes there: the finished stages are skipped, the finished episodes kept.
    (run_dir / MARKER_PATH).unlink()
    (run_dir / "eval_trained" / "results.json").unlink()
    episodes = (run_dir / "eval_trained" / "episodes.jsonl").read_text()
    output = _loop(run_dir)
    assert "eval_base already finished" in output and "training already finished" in output
    assert "resuming: 2 of 2 episodes already done" in output
    assert (run_dir / "eval_trained" / "episodes.jsonl").read_text() == episodes
    assert json.loads((run_dir / "eval_trained" / "results.json").read_text())["overall"]["episodes"] == 2
