"""`python -m piexp calibrate` through mode=eval's own code on a real
sandbox. The oracle passes every level, `wrong` none (no level in band, said so); a
test-fixture policy whose skill falls with difficulty puts exactly its middle level in the
band, and the preset it writes composes into a training run; a rerun resumes without
playing an episode twice; bad input is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

import piexp.config.presets as presets
import piexp.launch.evaluate as evaluate
from piexp.commands.calibrate import main
from piexp.config.compose import load
from piexp.errors import UserError
from piexp.policies import make_policy
from piexp.policies.observation import DecodeCache, decode_model_input
from piexp.tasks import FAMILIES, build_tasks
from tests.job_launcher import run_piexp


def _calibrate(sandbox_url: str, out: Path, *args: str) -> dict:
    assert main([*args, "sandbox=remote", f"sandbox.url={sandbox_url}", "--out", str(out)]) == 0
    return json.loads((out / "calibration.json").read_text())


def test_oracle_passes_every_level_and_no_level_is_in_band(sandbox_url, tmp_path):
    data = _calibrate(sandbox_url, tmp_path / "c", "family=arith", "lang=python", "policy=oracle", "n=2", "k=1")
    assert data["complete"] and [c["level"] for c in data["cells"]] == [1, 2, 3, 4, 5]
    assert all(c["pass@1"] == 1.0 and c["reward_shaped"] == 1.0 and c["tasks"] == 2 for c in data["cells"])
    assert data["proposal"]["arith"]["chosen"] is None and data["preset"] is None
    markdown = (tmp_path / "c" / "calibration.md").read_text()
    assert "every level is above the band" in markdown and "no preset was written" in markdown
    assert (tmp_path / "c" / "calibration.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "c" / "calibrated.yaml").exists()
    # Resume: the same command plays nothing again.
    episodes = tmp_path / "c" / "levels" / "arith" / "level-1" / "episodes.jsonl"
    before = episodes.read_text()
    _calibrate(sandbox_url, tmp_path / "c", "family=arith", "lang=python", "policy=oracle", "n=2", "k=1")
    assert episodes.read_text() == before


def test_the_oracle_solves_every_builtin_family_at_its_hardest_level(sandbox_url, tmp_path):
    """The top level still fits an episode (arith's 400 expressions once overflowed the context)."""
    data = _calibrate(
        sandbox_url, tmp_path / "c", "family=all", "lang=python", "policy=oracle", "n=2", "k=1", "levels=5"
    )
    assert len(data["cells"]) == len(FAMILIES)
    assert {c["family"]: c["pass@1"] for c in data["cells"]} == dict.fromkeys(FAMILIES, 1.0)


def test_wrong_fails_every_level(sandbox_url, tmp_path):
    data = _calibrate(
        sandbox_url, tmp_path / "c", "family=arith", "lang=python", "policy=wrong", "n=2", "k=1", "levels=1,5"
    )
    assert [c["level"] for c in data["cells"]] == [1, 5]
    assert all(c["pass@1"] == 0.0 and c["reward_shaped"] > 0.0 for c in data["cells"])
    assert data["proposal"]["arith"]["levels_in_band"] == [] and data["preset"] is None
    assert "every level is below the band" in (tmp_path / "c" / "calibration.md").read_text()
    # A level's folder is a run folder: show, rescore and replay take it (they refused it:
    # it had no .hydra record of its config).
    from piexp.commands.replay import main as replay
    from piexp.commands.rescore import main as rescore
    from piexp.commands.show import main as show

    level = tmp_path / "c" / "levels" / "arith" / "level-5"
    assert show([str(level), "--json"]) == 0
    assert rescore([str(level), "--out", str(tmp_path / "rescore")]) == 0
    report = json.loads((tmp_path / "rescore" / "rescore.json").read_text())
    assert report["reproduced"] == 2
    # One sample a task (k=1): no group to be constant, so the share is undefined, not 0%.
    assert report["settings"][0]["constant_groups"] is None
    assert "n/a (no groups of two or more samples)" in (tmp_path / "rescore" / "rescore.md").read_text()
    assert replay([str(level), "--out", str(tmp_path / "replay")]) == 0


def _solved_at_level_3(instruction: str) -> bool:
    return hashlib.sha256(instruction.encode()).digest()[0] % 2 == 1


class _SkillFallsWithDifficulty:
    """TEST FIXTURE standing in for a model: solves every dates task below level 3 (the
    oracle's moves), none above (the `wrong` policy's), and at level 3 the tasks whose
    instruction hashes odd; it tells the level by the tasks it is given, and the task by
    the instruction in what it sees."""

    def __init__(self, renderer, tasks) -> None:
        self.renderer = renderer
        nights = tasks[0].params["max_nights"]
        self.level = next(n for n in range(1, 6) if FAMILIES["dates"].level_params(n)["max_nights"] == nights)
        self.oracle = make_policy("oracle", renderer, tasks)
        self.wrong = make_policy("wrong", renderer, tasks)
        self.solvable = [t.instruction for t in tasks if _solved_at_level_3(t.instruction)]
        self.cache = DecodeCache()

    async def __call__(self, model_input, stop, **kwargs):
        if self.level < 3:
            chosen = self.oracle
        elif self.level > 3:
            chosen = self.wrong
        else:
            text = decode_model_input(self.renderer, model_input, self.cache)
            chosen = self.oracle if any(instruction in text for instruction in self.solvable) else self.wrong
        return await chosen(model_input, stop, **kwargs)


def test_a_policy_whose_skill_falls_with_difficulty_puts_its_middle_level_in_band(sandbox_url, tmp_path, monkeypatch):
    monkeypatch.setattr(
        evaluate, "make_policy", lambda name, renderer, tasks: _SkillFallsWithDifficulty(renderer, tasks)
    )
    level3 = build_tasks("eval", 8, 0, ["dates"], {"dates": FAMILIES["dates"].level_params(3)})
    expected = sum(_solved_at_level_3(task.instruction) for task in level3) / 8
    assert 0.2 <= expected <= 0.8  # the fixture's level 3 is in the default band
    data = _calibrate(sandbox_url, tmp_path / "c", "family=dates", "lang=python", "policy=oracle", "n=8", "k=1")
    proposal = data["proposal"]["dates"]
    assert proposal["pass@1_by_level"] == {"1": 1.0, "2": 1.0, "3": expected, "4": 0.0, "5": 0.0}
    assert proposal["levels_in_band"] == [3] and proposal["chosen"] == 3
    level3_cell = next(c for c in data["cells"] if c["level"] == 3)
    assert level3_cell["pass@1_ci95"] > 0.0  # varied tasks: a real interval
    # A narrower band that excludes it: no level, said so.
    narrow = _calibrate(
        sandbox_url, tmp_path / "c", "family=dates", "lang=python", "policy=oracle", "n=8", "k=1", "band=0.5-0.9"
    )
    assert narrow["proposal"]["dates"]["chosen"] is None and not (tmp_path / "c" / "calibrated.yaml").exists()
    # The preset (band back to default) is experiments/ format and composes into training at level 3.
    _calibrate(sandbox_url, tmp_path / "c", "family=dates", "lang=python", "policy=oracle", "n=8", "k=1")
    preset = yaml.safe_load((tmp_path / "c" / "calibrated.yaml").read_text())
    assert preset["defaults"] == [{"override /mode": "train"}, {"override /family": ["dates"]}]
    # Selected by name from an experiments folder, it composes into a training run at level 3.
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "calibrated_dates.yaml").write_text((tmp_path / "c" / "calibrated.yaml").read_text())
    monkeypatch.setattr(presets, "experiments_dir", lambda: experiments)
    monkeypatch.setattr(presets, "_registered", False)
    config = load(["experiment=calibrated_dates"])
    assert config.mode.name == "train" and config.families == ["dates"]
    assert {k: config.family["dates"][k] for k in preset["family"]["dates"]} == FAMILIES["dates"].level_params(3) | {
        "first_year": 2019
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["band=0.8-0.2"], "0 <= low < high <= 1"),
        (["band=0.2-1.5"], "0 <= low < high <= 1"),
        (["levels=0-3"], r"levels 1\.\.5; 0 is not one"),
        (["levels=6"], r"levels 1\.\.5"),
        (["n=1"], "n must be an integer >= 2"),
        (["family=all", "n=20"], "above its budget of 2000 episodes"),
        (["budget=10"], "above its budget of 10 episodes"),
        (["mode=train"], "calibrate runs mode=eval"),
        (["family.arith.max_depth=2"], "calibrate sets arith's difficulty parameters"),
        (["--yess"], "Unknown option --yess"),
        (["hydra.run.dir=elsewhere"], "name two different folders for the calibration"),
        (["hydra.sweep.dir=elsewhere"], "calibrate is not a sweep"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(tmp_path, args, message):
    with pytest.raises(UserError, match=message):
        main(["family=arith", "lang=python", "policy=oracle", *args, "--out", str(tmp_path / "c")])
    assert not (tmp_path / "c").exists()


def test_a_family_without_declared_difficulty_is_refused(monkeypatch):
    import dataclasses

    from piexp.launch.calibrate import declared_family
    from piexp.tasks import registry

    monkeypatch.setitem(registry._active, "arith", dataclasses.replace(FAMILIES["arith"], difficulty=None))
    with pytest.raises(UserError, match="family arith declares no difficulty levels"):
        declared_family("arith")


def test_a_multi_family_preset_calibrates_a_scripted_policy_on_its_local_model_offline(tmp_path):
    """`calibrate experiment=learn_offline policy=oracle`: each level runs one family of the
    preset (whose params for the other were once refused as an unknown family), and a
    scripted policy renders with learner-local's own tokenizer, registered offline without
    building the model (it was looked up on the Hugging Face hub). HF_HUB_OFFLINE makes a
    hub lookup fail at once instead of retrying."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TINKER_API_KEY", None)
    result = run_piexp(
        "calibrate",
        "experiment=learn_offline",
        "policy=oracle",
        "levels=1",
        "n=2",
        "k=1",
        "--out",
        str(tmp_path / "c"),
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    data = json.loads((tmp_path / "c" / "calibration.json").read_text())
    assert {(c["family"], c["level"], c["pass@1"]) for c in data["cells"]} == {
        ("json_tree", 1, 1.0),
        ("csv_agg", 1, 1.0),
    }
