"""`python -m piexp replay`: recorded episodes of real eval and check runs played again
through today's parse, tools, sandbox and reward. On unchanged code every one replays
identically; a reward weight or a tool's result format changed on purpose is reported at
the first turn it shows, with exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piexp.commands.replay import main as replay
from piexp.errors import UserError
from tests.job_launcher import run_piexp

SMALL = ["family=arith,json_tree", "lang=[python,javascript]", "tasks.eval_per_family=2", "tasks.train_per_family=1"]


def _run(folder: Path, *overrides: str) -> Path:
    done = run_piexp(*SMALL, *overrides, f"hydra.run.dir={folder}", cwd=folder.parent, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("replay")
    return {
        "oracle": _run(root / "oracle", "mode=eval", "policy=oracle", "mode.preflight=false"),
        "wrong": _run(root / "wrong", "mode=eval", "policy=wrong", "k=2", "mode.preflight=false"),
        "check": _run(root / "check", "mode=check", "mode.oracle_tasks_per_cell=1"),
    }


def _report(out: Path) -> dict:
    return json.loads((out / "replay.json").read_text())


@pytest.mark.parametrize("name", ["oracle", "wrong", "check"])
def test_unchanged_code_replays_every_episode_identically(runs, name, tmp_path):
    assert replay([str(runs[name]), "--out", str(tmp_path)]) == 0
    report = _report(tmp_path)
    assert report["episodes"] > 0 and report["identical"] == report["episodes"]
    assert "replay identically" in (tmp_path / "replay.md").read_text()


def test_a_changed_reward_weight_is_reported_with_both_values(runs, tmp_path):
    assert replay([str(runs["wrong"]), "0", "--failed", "reward.weights.mutation=0.2", "--out", str(tmp_path)]) == 1
    (outcome,) = _report(tmp_path)["outcomes"]
    assert outcome["difference"] == {"where": "end of episode", "kind": "shaped", "recorded": 0.3, "replayed": 0.35}


def test_a_changed_tool_result_format_is_reported_at_its_first_turn(runs, tmp_path, bash_result_key_renamed):
    assert replay([str(runs["oracle"]), "0", "--out", str(tmp_path)]) == 1
    (outcome,) = _report(tmp_path)["outcomes"]
    difference = outcome["difference"]
    assert difference["kind"] == "tool result" and difference["where"] == "turn 3"  # read, write, then bash
    assert difference["recorded"]["result"]["return_code"] == 0 and "exit_code" in difference["replayed"]["result"]


def test_bad_input_is_refused(runs, tmp_path):
    with pytest.raises(UserError, match="row numbers and reward overrides"):
        replay([str(runs["oracle"]), "limits.max_turns=2"])
    with pytest.raises(UserError, match="Row numbers run from 0 to"):
        replay([str(runs["oracle"]), "99"])
    with pytest.raises(UserError, match="No eval episodes of .* match the filters"):
        replay([str(runs["oracle"]), "--failed"])
