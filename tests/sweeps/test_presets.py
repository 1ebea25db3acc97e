"""Experiment presets: every one composes into a valid run (sweep presets: every job of
the sweep), is registered as a Hydra sweeper config where it is a sweep, and completes in
the offline mode (oracle evaluation)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from piexp.config.compose import load, sweep_combinations
from piexp.config.presets import preset_names

from sweep_helpers import SMALL, read_json, run_piexp

REQUIRED = {"offline", "arith_polyglot", "all_families", "reward_sweep", "binary_vs_shaped"}
SWEEPS = {"reward_sweep": 3, "binary_vs_shaped": 6}
HAS_JULIA = shutil.which("julia") is not None


def _hydra_cfg(name: str):
    from hydra import compose, initialize_config_dir

    from piexp.config.paths import config_dir
    from piexp.config.presets import register_presets

    register_presets()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose("config", overrides=[f"experiment={name}"], return_hydra_config=True)


def test_required_presets_exist_and_say_what_they_are_for() -> None:
    from piexp.config.paths import experiments_dir

    assert REQUIRED <= set(preset_names())
    for name in preset_names():
        first = (experiments_dir() / f"{name}.yaml").read_text().lstrip()
        assert first.startswith(f"# {name}:"), f"{name}.yaml must open with a comment on its purpose"


@pytest.mark.parametrize("name", sorted(preset_names()))
def test_preset_composes(name: str) -> None:
    config = load([f"experiment={name}"])
    assert config.families and config.lang


def test_preset_contents() -> None:
    assert load(["experiment=arith_polyglot"]).lang == ["python", "javascript", "julia"]
    assert load(["experiment=arith_polyglot"]).families == ["arith"]
    from piexp.tasks import FAMILIES

    assert set(load(["experiment=all_families"]).families) == set(FAMILIES)


@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_sweep_presets_are_hydra_sweeper_configs(name: str) -> None:
    """The sweep lives in hydra.sweeper.params of a ConfigStore-registered preset, and
    launches itself as a multirun; every job it would launch is a valid run."""
    cfg = _hydra_cfg(name)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    params = [f"{key}={value}" for key, value in cfg.hydra.sweeper.params.items()]
    jobs = list(sweep_combinations([f"experiment={name}", *params]))
    assert len(jobs) == SWEEPS[name]
    configs = [load(job) for job in jobs]
    if name == "reward_sweep":
        assert [c.reward.weights.output for c in configs] == [0.4, 0.6, 0.8]
    else:
        assert {(c.reward.mode, c.seed) for c in configs} == {(m, s) for m in ("binary", "shaped") for s in (0, 1, 2)}


def test_single_run_presets_complete_offline(tmp_path: Path) -> None:
    """offline, arith_polyglot and all_families as one parallel multirun in the offline mode."""
    sweep = tmp_path / "presets"
    langs = [] if HAS_JULIA else ["lang=[python,javascript]", "eval_lang=[python,javascript]"]
    # offline and all_families select every family: one language keeps this test short.
    result = run_piexp(
        tmp_path,
        "-m",
        "experiment=offline,arith_polyglot,all_families",
        *SMALL,
        *(langs or []),
        "hydra.launcher.n_jobs=3",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for job in ("0", "1", "2"):
        results = read_json(sweep / job / "results.json")
        assert results["overall"]["pass@1"] == 1.0, (job, results["overall"])
        assert (sweep / job / ".piexp" / "complete.json").is_file()


def test_binary_vs_shaped_completes_offline(tmp_path: Path) -> None:
    sweep = tmp_path / "bvs"
    # One seed instead of three (the preset's own sweeper param, overridden): 2 jobs.
    result = run_piexp(
        tmp_path,
        "experiment=binary_vs_shaped",
        *SMALL,
        "lang=[python]",
        "hydra.sweeper.params.seed=0",
        f"hydra.sweep.dir={sweep}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    status = read_json(sweep / "sweep_status.json")["jobs"]
    assert {entry["state"] for entry in status.values()} == {"complete"} and len(status) == 2
    modes = sorted(read_json(sweep / j / "manifest.json")["mode"] for j in ("0", "1"))
    assert modes == ["eval", "eval"]


def test_config_leaves_launcher_settings_to_the_launcher() -> None:
    """conf/config.yaml selects joblib through its defaults list only: a hydra.launcher
    key there would be merged into any launcher, and the submitit launchers (the
    documented switch to SLURM) have no joblib keys, so they would fail to compose."""
    import yaml

    from piexp.config.paths import config_dir

    config = yaml.safe_load((config_dir() / "config.yaml").read_text())
    assert "launcher" not in config["hydra"]
    assert {"override hydra/launcher": "joblib"} in config["defaults"]
