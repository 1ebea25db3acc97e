"""End to end on `service=local model=tiny-local`: a real Pi workspace run (arith,
Python) trains RL iterations through the local SkyRL server after an oracle warm start,
the optimizer steps, checkpoints are saved, a rerun on the same folder resumes from them
(with difficulty pools on: the resumed step's pools are those its group outcomes on file
make), and no server process is left behind; `checkpoint=<run folder>` then evaluates the
trained model on a fresh server, and `calibrate` evaluates it at five levels on one server.
No account, no network (once the server venv exists). About 5-7 minutes on 2 CPU cores."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.job_launcher import run_piexp

pytestmark = pytest.mark.slow

OVERRIDES = [
    "service=local",
    "model=tiny-local",
    "family=arith",
    "lang=python",
    "tasks.train_per_family=4",
    "tasks.eval_per_family=2",
    "mode.group_size=4",
    "mode.groups_per_batch=2",
    "mode.save_every=1",
    "mode.eval_every=0",
    "mode.preflight=false",
    "limits.max_turns=4",  # the oracle needs 4 turns (read, write, run, answer)
    "limits.max_generation_tokens=512",  # its longest action (the program) is ~450 tokens
    "warm_start.sft_steps=1",
    "warm_start.tasks=1",
    "tasks.pools.enabled=true",  # an online control: its state must survive the resume
]


def _train(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}  # no key needed
    result = run_piexp(*OVERRIDES, *extra, f"hydra.run.dir={run_dir}", env=env, timeout=1500)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return result


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pools_from_outcomes(run_dir: Path, before_step: int, groups: int) -> dict[str, float]:
    """The pool sizes group_outcomes.jsonl implies before `before_step`, recomputed here
    from the file (default thresholds: all passed easy, none passed hard, else normal;
    a (task, language) group never graded stays normal)."""
    latest: dict[tuple[str, str], float] = {}
    for row in _rows(run_dir / "group_outcomes.jsonl"):
        if row["step"] < before_step:
            latest[(row["task_digest"], row["language"])] = sum(row["outcomes"]) / len(row["outcomes"])
    easy = sum(rate >= 1.0 for rate in latest.values())
    hard = sum(rate <= 0.0 for rate in latest.values())
    return {"controls/pool/easy": easy, "controls/pool/normal": groups - easy - hard, "controls/pool/hard": hard}


def _server_processes(run_dir: Path) -> list[str]:
    """Command lines of live processes that belong to this run's local server."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "piexp_skyrl_launcher" in cmdline and str(run_dir) in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def test_local_training_steps_checkpoints_and_resumes(server_venv: Path, tiny_model: Path, tmp_path: Path) -> None:
    """Slow (minutes): real warm-start and RL steps of tiny-local through the local server,
    twice (the run, then its resume), then an eval of the checkpoint on a fresh server."""
    run_dir = tmp_path / "run"
    first = _train(run_dir, "mode.max_steps=2")
    # The console: a line a step instead of the cookbook's table of every metric (which is
    # in job.log), none of the tinker SDK's deprecation warnings, and a closing line.
    shown = first.stdout + first.stderr
    assert "step 0, reward" in shown and "step 1, reward" in shown, shown[-3000:]
    assert "┃ Metric" not in shown and "FutureWarning" not in shown, shown[-3000:]
    assert f"wrote {run_dir / 'metrics.jsonl'}" in shown and "┃ Metric" in (run_dir / "job.log").read_text()

    warm = json.loads((run_dir / "warm_start.json").read_text())
    assert warm["steps"] and warm["steps"][0]["skyrl.ai/grad_norm"] > 0
    assert warm["oracle_mean_reward"] > 0.5  # the oracle solved the tasks it demonstrated

    metrics = _rows(run_dir / "metrics.jsonl")
    assert [row["step"] for row in metrics] == [0, 1]
    grad_norms = [row["skyrl.ai/grad_norm"] for row in metrics]
    assert any(norm > 0 for norm in grad_norms), f"the optimizer never moved: grad norms {grad_norms}"

    checkpoints = _rows(run_dir / "checkpoints.jsonl")
    assert {row["batch"] for row in checkpoints} >= {1, 2}
    assert all(row["state_path"].startswith("tinker://") for row in checkpoints)
    summary = (run_dir / "summary.md").read_text()
    assert "Warm start" in summary and "RL reward per iteration" in summary
    assert _server_processes(run_dir) == []

    second = _train(run_dir, "mode.max_steps=3")
    assert "Resumed training from tinker://" in second.stdout + second.stderr + (run_dir / "logs.log").read_text()
    metrics = _rows(run_dir / "metrics.jsonl")
    steps = [row["step"] for row in metrics]
    assert steps == [0, 1, 2], f"the rerun did not continue from the checkpoint: steps {steps}"
    # The resumed process rebuilt the pools from the outcomes on file: step 2's batch was
    # drawn from what steps 0-1 graded (4 arith tasks x python), not from fresh pools.
    outcomes = _rows(run_dir / "group_outcomes.jsonl")
    assert sorted((row["step"], row["group"]) for row in outcomes) == [(s, g) for s in range(3) for g in range(2)]
    for row in metrics:
        pools = {key: value for key, value in row.items() if key.startswith("controls/pool/")}
        assert pools == _pools_from_outcomes(run_dir, row["step"], groups=4), (row["step"], pools)
        assert row["controls/groups"] == 2 and 0 <= row["controls/informative_fraction"] <= 1
    fresh = {"controls/pool/easy": 0, "controls/pool/normal": 4, "controls/pool/hard": 0}
    assert _pools_from_outcomes(run_dir, 2, groups=4) != fresh, "no group left the normal pool: nothing to rebuild"
    assert max(row["batch"] for row in _rows(run_dir / "checkpoints.jsonl")) == 3
    assert _server_processes(run_dir) == []

    # The trained run's final checkpoint, evaluated from its run folder by a fresh server
    # on that run's state: every episode runs (none fails to load the model).
    eval_dir = tmp_path / "eval"
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    result = run_piexp(
        "mode=eval",
        "policy=model",
        "service=local",
        "model=tiny-local",
        "family=arith",
        "lang=python",
        "tasks.eval_per_family=2",
        "mode.preflight=false",
        "limits.max_turns=2",
        "limits.max_generation_tokens=64",
        f"checkpoint={run_dir}",
        f"hydra.run.dir={eval_dir}",
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads((eval_dir / "results.json").read_text())
    assert results["checkpoint"] == str(run_dir) and results["overall"]["episodes"] == 2
    assert "Loaded training checkpoint" in (run_dir / "local_service" / "server.log").read_text()
    assert _server_processes(run_dir) == []

    # calibrate evaluates the checkpoint once per level on one server, which holds at most
    # 4 LoRA adapters: five levels load it once (each level loaded it anew and the fourth
    # failed with "Maximum number of LoRA adapters (4) reached").
    result = run_piexp(
        "calibrate",
        "service=local",
        "model=tiny-local",
        "family=arith",
        "lang=python",
        "policy=model",
        f"checkpoint={run_dir}",
        "levels=1-5",
        "n=2",
        "k=1",
        "limits.max_turns=2",
        "limits.max_generation_tokens=64",
        "--out",
        str(tmp_path / "calibration"),
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    cells = json.loads((tmp_path / "calibration" / "calibration.json").read_text())["cells"]
    assert [(cell["level"], cell["episodes"]) for cell in cells] == [(level, 2) for level in range(1, 6)]
    assert _server_processes(run_dir) == []
