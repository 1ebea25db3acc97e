"""`python -m piexp rescore`: recorded episodes of a real eval rescored under other reward
settings without sampling: today's reward reproduces the recorded one under the run's own
settings, a weight list gives one setting per value with the means the formula gives,
`reward=binary` zeroes partial credit, and bad input is refused before anything is
written."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest

from piexp.commands.rescore import main as rescore
from piexp.errors import UserError
from tests.job_launcher import run_piexp


@pytest.fixture(scope="module")
def wrong_run(tmp_path_factory) -> Path:
    """A real eval of the `wrong` policy (writes and runs a program that prints a wrong
    number: mutation and execution hold, output and answer do not), k=2."""
    run = tmp_path_factory.mktemp("rescore") / "wrong"
    done = run_piexp(
        "mode=eval",
        "policy=wrong",
        "family=arith,dates",
        "lang=[python,javascript]",
        "k=2",
        "tasks.eval_per_family=2",
        "tasks.train_per_family=1",
        "mode.preflight=false",
        f"hydra.run.dir={run}",
        cwd=run.parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return run


def _report(out: Path) -> dict:
    return json.loads((out / "rescore.json").read_text())


def test_the_run_own_settings_reproduce_every_recorded_reward(wrong_run, tmp_path):
    assert rescore([str(wrong_run), "--out", str(tmp_path / "own")]) == 0
    report = _report(tmp_path / "own")
    assert report["episodes"] == 2 * 2 * 2 * 2 and report["reproduced"] == report["episodes"] and not report["differ"]
    (own,) = report["settings"]
    assert own["mean"] == pytest.approx(0.30)  # mutation 0.15 + execution 0.15
    assert "sampled under the run's own reward settings" in (tmp_path / "own" / "rescore.md").read_text()


def test_a_weight_list_gives_one_setting_per_value(wrong_run, tmp_path):
    out = tmp_path / "weights"
    assert rescore([str(wrong_run), "reward.weights.mutation=0.1,0.2,0.3", "--out", str(out)]) == 0
    settings = _report(out)["settings"]
    assert [s["label"] for s in settings] == [f"reward.weights.mutation={v}" for v in ("0.1", "0.2", "0.3")]
    assert [s["mean"] for s in settings] == pytest.approx([0.25, 0.35, 0.45])
    for setting in settings:
        assert setting["constant_groups"] == 1.0, "a scripted policy does the same in every sample"
        assert all(group["advantages"] == [0.0, 0.0] for group in setting["groups"])
        assert setting["cells"]["arith"]["python"] == pytest.approx(setting["mean"])
    assert (out / "rescore.png").read_bytes()[:4] == b"\x89PNG"


def test_binary_reward_leaves_no_partial_credit(wrong_run, tmp_path):
    assert rescore([str(wrong_run), "reward=binary", "--out", str(tmp_path / "b")]) == 0
    (binary,) = _report(tmp_path / "b")["settings"]
    assert binary["mean"] == 0.0


def test_bad_input_is_refused_before_anything_is_written(wrong_run, tmp_path):
    out = tmp_path / "refused"
    with pytest.raises(UserError, match="reward overrides only"):
        rescore([str(wrong_run), "limits.max_turns=3", "--out", str(out)])
    with pytest.raises(UserError, match="is not a piexp run folder"):
        rescore([str(tmp_path), "--out", str(out)])
    assert not out.exists()


def _with_first_transcript_changed(run: Path, copy: Path, **changes: object) -> dict:
    """A copy of `run` whose first transcript has `changes`; returns that transcript."""
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    path = copy / "transcripts.jsonl.gz"
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    first = {**json.loads(lines[0]), **changes}
    path.write_bytes(gzip.compress(("\n".join([json.dumps(first), *lines[1:]]) + "\n").encode()))
    return first


def test_a_transcript_cut_by_its_caps_is_refused_naming_the_episode(wrong_run, tmp_path):
    first = _with_first_transcript_changed(wrong_run, tmp_path / "copy", truncated={"fields": 1, "chars_cut": 500})
    with pytest.raises(UserError, match=f"wrong on {first['task_id']} .* cut by the transcript caps"):
        rescore([str(tmp_path / "copy"), "--out", str(tmp_path / "o")])


def test_a_transcript_of_another_format_version_is_refused_naming_it(wrong_run, tmp_path):
    _with_first_transcript_changed(wrong_run, tmp_path / "copy", version=99)
    with pytest.raises(UserError, match="has format version 99; this piexp reads version 1"):
        rescore([str(tmp_path / "copy"), "--out", str(tmp_path / "o")])


def test_a_task_changed_since_the_recording_is_refused_naming_it(wrong_run, tmp_path):
    """The manifest records each split's task digests in order; a rebuilt task whose
    digest differs (here: the recorded one altered) may have another answer."""
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(wrong_run), str(copy)], check=True)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["task_digests"]["eval"][0] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"Task \S+ changed since the run was recorded \(digest 000000000000 then"):
        rescore([str(copy), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()
