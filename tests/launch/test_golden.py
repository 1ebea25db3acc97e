"""Golden episodes: a recorded check run under `tests/golden/check` (every family x Python
and JavaScript, each scripted policy: oracle, guess, crash, wrong and edit, failing
programs included) and a small recorded eval of `model=learner-local` under
`tests/golden/learner_local` (real model turns in its smaller vocabulary, a passing
program among failing ones), with one RL iteration's recorded training episodes under
`tests/golden/learner_local_train` (malformed tool calls among them), a recorded check run
through the real Pi under `tests/golden/pi_check` (arith and dates x Python and JavaScript,
each scripted policy) and the last RL step of `model=learner-local-pi` trained in Pi under
`tests/golden/learner_local_pi_train` (the model's own turns through Pi) are replayed through today's parse, tools, sandbox, Pi and reward on
every suite run; no model is needed to replay. A change that alters what any
of them earns fails here with the replay's first difference. After a deliberate change,
re-record with `scripts/regenerate_golden.sh [--learner-local]` and review the diff of
`tests/golden/` like code."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from piexp.commands.replay import main as replay
from tests.harness.conftest import requires_pi

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "check"
LEARNER = GOLDEN.parent / "learner_local"
LEARNER_TRAIN = GOLDEN.parent / "learner_local_train"
PI_CHECK = GOLDEN.parent / "pi_check"
LEARNER_PI_TRAIN = GOLDEN.parent / "learner_local_pi_train"


def test_the_golden_episodes_replay_identically(tmp_path):
    code = replay([str(GOLDEN), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "replay.json").read_text())
    changed = [o for o in report["outcomes"] if not o["identical"]]
    assert code == 0 and not changed, (tmp_path / "replay.md").read_text()
    policies = {o["policy"] for o in report["outcomes"]}
    assert policies == {"oracle", "guess", "crash", "wrong", "edit"} and report["episodes"] == 96


@requires_pi
def test_the_pi_golden_episodes_replay_identically_through_today_s_pi(tmp_path):
    """About 30 s on 2 cores: every recorded Pi episode's turns sent again through today's
    Pi (the version the golden was recorded with) and sandbox earn what they earned."""
    code = replay([str(PI_CHECK), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "replay.json").read_text())
    changed = [o for o in report["outcomes"] if not o["identical"]]
    assert code == 0 and not changed, (tmp_path / "replay.md").read_text()
    assert {o["policy"] for o in report["outcomes"]} == {"oracle", "guess", "crash", "wrong", "edit"}
    assert report["episodes"] == 24
    assert json.loads((PI_CHECK / "manifest.json").read_text())["harness"]["name"] == "pi"


@requires_pi
def test_the_learner_local_pi_training_episodes_replay_identically_through_today_s_pi(tmp_path):
    """About 40 s on 2 cores: the last RL step's 16 episodes of learner-local-pi trained in
    Pi (a pass, printed answers restated wrong, crashes: the model's own turns) answer
    today's Pi's requests again and earn what they earned, turn for turn."""
    code = replay([str(LEARNER_PI_TRAIN), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "replay.json").read_text())
    changed = [o for o in report["outcomes"] if not o["identical"]]
    assert code == 0 and not changed, (tmp_path / "replay.md").read_text()
    assert report["episodes"] == 16 and {o["policy"] for o in report["outcomes"]} == {"model"}
    with gzip.open(LEARNER_PI_TRAIN / "train_transcripts.jsonl.gz", "rt") as lines:
        played = [json.loads(line) for line in lines]
    assert {t["harness"] for t in played} == {"pi"} and {t["reward"] for t in played} == {0.0, 1.0}


@requires_pi
def test_a_changed_reward_weight_shows_in_every_pi_golden_crash_episode(tmp_path):
    """A crashing program earns mutation and nothing else in Pi as in the reference
    environment: a changed mutation weight moves each such episode's shaped reward."""
    code = replay([str(PI_CHECK), "--policy", "crash", "reward.weights.mutation=0.2", "--out", str(tmp_path)])
    outcomes = json.loads((tmp_path / "replay.json").read_text())["outcomes"]
    assert code == 1 and len(outcomes) == 4
    for outcome in outcomes:
        assert outcome["difference"] == {"kind": "shaped", "recorded": 0.15, "replayed": 0.2, "where": "end of episode"}


def test_the_learner_local_golden_episodes_replay_identically(tmp_path):
    code = replay([str(LEARNER), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "replay.json").read_text())
    changed = [o for o in report["outcomes"] if not o["identical"]]
    assert code == 0 and not changed, (tmp_path / "replay.md").read_text()
    assert {o["policy"] for o in report["outcomes"]} == {"model"} and report["episodes"] == 16
    rewards = [json.loads(line)["reward"] for line in (LEARNER / "episodes.jsonl").read_text().splitlines()]
    assert 1.0 in rewards and 0.0 in rewards  # a solved task and failing programs


def test_a_changed_reward_weight_shows_in_every_failing_learner_local_episode(tmp_path):
    """A failing program earns mutation and nothing else (0.15 shaped): a changed mutation
    weight moves each such episode's reward, reported at the end of the episode."""
    code = replay([str(LEARNER), "--failed", "reward.weights.mutation=0.2", "--out", str(tmp_path)])
    outcomes = json.loads((tmp_path / "replay.json").read_text())["outcomes"]
    assert code == 1 and outcomes
    for outcome in outcomes:
        assert outcome["difference"]["kind"] == "shaped" and outcome["difference"]["where"] == "end of episode"
        assert outcome["difference"]["replayed"] > outcome["difference"]["recorded"]


def test_a_changed_tool_result_format_shows_at_the_first_bash_turn_of_a_learner_local_episode(
    tmp_path, bash_result_key_renamed
):
    assert replay([str(LEARNER), "0", "--out", str(tmp_path)]) == 1
    (outcome,) = json.loads((tmp_path / "replay.json").read_text())["outcomes"]
    assert outcome["difference"]["kind"] == "tool result"
    assert "exit_code" in outcome["difference"]["replayed"]["result"]


def test_the_learner_local_training_episodes_with_malformed_tool_calls_replay_identically(tmp_path):
    """A tool call the model never closed stays in the turn's text and is also described
    as unparsed: replay must not write it twice (it did, and every such episode differed)."""
    code = replay([str(LEARNER_TRAIN), "--out", str(tmp_path)])
    report = json.loads((tmp_path / "replay.json").read_text())
    changed = [o for o in report["outcomes"] if not o["identical"]]
    assert code == 0 and not changed, (tmp_path / "replay.md").read_text()
    assert report["episodes"] == 16
    with gzip.open(LEARNER_TRAIN / "train_transcripts.jsonl.gz", "rt") as lines:
        transcripts = [json.loads(line) for line in lines]
    malformed = [t for t in transcripts if any(m.get("unparsed_tool_calls") for m in t["conversation"])]
    assert malformed and {t["reward"] for t in malformed} == {-0.1}  # Qwen's one-shot parse-error reward


def test_golden_folders_recorded_before_harnesses_read_as_builtin(tmp_path, capsys):
    """Run folders recorded before results named their harness (no `harness` in the
    manifest) still read, and every view names them as played by the builtin harness:
    show's listing and an episode, and the viewer's header."""
    from piexp.commands.show import main as show
    from piexp.run_folder import RunFolder

    for folder in (GOLDEN, LEARNER, LEARNER_TRAIN):
        assert "harness" not in json.loads((folder / "manifest.json").read_text())
        assert RunFolder(folder).harness() == {"name": "builtin"}
        assert show([str(folder)]) == 0
        assert "episodes, harness builtin" in capsys.readouterr().out
        assert show([str(folder), "0"]) == 0
        assert "harness builtin)" in capsys.readouterr().out
        page = tmp_path / folder.name / "viewer.html"
        assert show([str(folder), "--html", str(page)]) == 0
        assert f"piexp: {folder} (harness builtin)" in page.read_text(encoding="utf-8")
