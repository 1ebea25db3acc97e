"""A third harness, implementing only what docs/harness.md's interface requires and
selected from a user's own config folder, runs `mode=check` and `mode=eval` through that
interface alone: piexp's launch code asks the harness, never its name, so a harness that
plays the reference environment's episodes gets the builtin harness's results."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from piexp.config.compose import load
from piexp.config.schema import HarnessSettings
from piexp.errors import UserError
from piexp.harness.base import make_harness
from tests.harness.minimal_harness import YAML, MinimalHarness
from tests.harness.test_pi_runs import piexp

SMALL = ["family=arith", "lang=python"]
# What an episode's outcome is, without its timing (`wall_s`) or the last run's diagnostics.
OUTCOME = ("policy", "task_id", "language", "sample", "reward", "shaped", "metrics", "stop_reason", "turns",
           "tool_calls", "answer", "error", "failures", "expectation_violation")  # fmt: skip


def _runs(tmp_path: Path, *args: str) -> dict[str, Path]:
    """The same run in the builtin harness and in the minimal one (`--config-dir`)."""
    conf = tmp_path / "conf"
    (conf / "harness").mkdir(parents=True, exist_ok=True)
    (conf / "harness" / "minimal.yaml").write_text(YAML)
    runs = {}
    for harness in ("builtin", "minimal"):
        run_dir = runs[harness] = tmp_path / f"{args[0].partition('=')[2]}-{harness}"
        done = piexp("--config-dir", str(conf), *args, f"harness={harness}", *SMALL, f"hydra.run.dir={run_dir}")
        assert done.returncode == 0, done.stderr[-3000:]
    return runs


def _outcomes(report: dict[str, Any]) -> list[dict[str, Any]]:
    episodes = [{key: episode.get(key) for key in OUTCOME} for episode in report["episodes"]]
    return sorted(episodes, key=lambda e: (e["policy"], e["task_id"], e["language"], e["sample"]))


def test_a_minimal_harness_checks_like_builtin(tmp_path):
    """`mode=check` (every scripted policy, one oracle task per cell) in both harnesses:
    the same episodes with the same outcomes, and the check names the minimal harness."""
    runs = _runs(tmp_path, "mode=check", "mode.oracle_tasks_per_cell=1")
    builtin, minimal = (json.loads((runs[name] / "check.json").read_text()) for name in ("builtin", "minimal"))
    assert minimal["passed"] and minimal["oracle_pass_rate"] == builtin["oracle_pass_rate"] == 1.0
    assert _outcomes(minimal) == _outcomes(builtin)
    assert minimal["harness"]["name"] == "minimal" and builtin["harness"]["name"] == "builtin"
    manifest = json.loads((runs["minimal"] / "manifest.json").read_text())
    assert manifest["harness"]["name"] == "minimal"


def test_a_minimal_harness_evaluates_the_oracle_like_builtin(tmp_path):
    """`mode=eval policy=oracle` in both harnesses: the same pass rate, rewards and
    metrics over the same episodes."""
    runs = _runs(tmp_path, "mode=eval", "policy=oracle", "tasks.eval_per_family=2", "mode.preflight=false")
    builtin, minimal = (json.loads((runs[name] / "results.json").read_text()) for name in ("builtin", "minimal"))
    assert minimal["overall"]["pass@1"] == builtin["overall"]["pass@1"] == 1.0
    assert minimal["overall"]["episodes"] == builtin["overall"]["episodes"] == 2
    assert minimal["overall"]["metrics"] == builtin["overall"]["metrics"]
    assert minimal["overall"]["reward_shaped"] == builtin["overall"]["reward_shaped"]
    assert minimal["harness"]["name"] == "minimal"


def test_a_harness_without_warm_start_data_refuses_the_warm_start_with_the_way_out():
    """The warm start asks the run's harness for its imitation data
    (`warm_start_trajectories`); a harness that does not say how to play them refuses
    with `warm_start.sft_steps=0` named, instead of imitating another harness's episodes."""
    settings = HarnessSettings.model_validate(yaml.safe_load(YAML))
    harness = make_harness(settings)
    assert isinstance(harness, MinimalHarness)
    config = load(["harness=builtin", "warm_start.sft_steps=1"])
    with pytest.raises(UserError, match=r"harness=minimal, which it cannot play as such; set warm_start\.sft_steps=0"):
        asyncio.run(harness.warm_start_trajectories(config, "http://127.0.0.1:9/run_code", []))
