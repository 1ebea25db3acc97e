"""Golden episodes: a recorded check run under `tests/golden/check` (every family x Python
and JavaScript, each scripted policy: oracle, guess, crash, wrong and edit, failing
programs included) is replayed through today's parse, tools, sandbox and reward on every
suite run. A change that alters what any of them earns fails here with the replay's
first difference. After a deliberate change, re-record with
`scripts/regenerate_golden.sh` and review the diff of `tests/golden/` like code."""

from __future__ import annotations

import json
from pathlib import Path

from piexp.commands.replay import main as replay

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "check"


def test_the_golden_episodes_replay_identically(tmp_path):
    code = replay([str(GOLDEN), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "replay.json").read_text())
    changed = [o for o in report["outcomes"] if not o["identical"]]
    assert code == 0 and not changed, (tmp_path / "replay.md").read_text()
    policies = {o["policy"] for o in report["outcomes"]}
    assert policies == {"oracle", "guess", "crash", "wrong", "edit"} and report["episodes"] == 96
