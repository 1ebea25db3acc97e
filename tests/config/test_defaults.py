"""One source per default: the YAML under conf/ holds every value, the schema only types,
bounds and descriptions. Code asks `default_settings` for "the default X"; a run folder
saved before an option existed still reads, that option taking its composed value."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from pydantic import BaseModel

from piexp.config.algo import AlgoSettings
from piexp.config.compose import compose, load, validate_saved
from piexp.config.defaults import default_settings
from piexp.config.schema import CheckMode, EvalMode, LanguageSettings, LocalService, RunConfig, WarmStartSettings
from piexp.errors import UserError

# The only fields code gives a default: each is absent from some YAML on purpose, and
# None, so no value lives in two places.
CODE_DEFAULTS = {
    (LanguageSettings, "sandbox_language"): None,  # derived from the language registry
}


def _settings_models(model: type[BaseModel]) -> set[type[BaseModel]]:
    """`model` and every settings model nested in it (through unions, lists and dicts)."""
    found = {model}
    for field in model.model_fields.values():
        pending = [field.annotation]
        while pending:
            annotation = pending.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                if annotation not in found:
                    found |= _settings_models(annotation)
            else:
                pending.extend(typing.get_args(annotation))
    return found


def test_the_default_config_composes() -> None:
    config = load([])
    assert config.mode.name == "train" and config.algo.recipe == "default"


def test_every_field_the_yaml_sets_is_required_and_described() -> None:
    models = _settings_models(RunConfig)
    assert {AlgoSettings, CheckMode, LocalService, WarmStartSettings} <= models
    for model in models:
        for name, field in model.model_fields.items():
            if (model, name) in CODE_DEFAULTS:
                assert not field.is_required() and field.default == CODE_DEFAULTS[model, name]
                continue
            assert field.is_required(), f"{model.__name__}.{name} has a default in code; conf/ holds it"
            assert field.description, f"{model.__name__}.{name} has no Field(description=...)"


def test_default_settings_are_the_composed_yaml() -> None:
    config = load([])
    assert default_settings("algo", AlgoSettings) == config.algo
    assert default_settings("warm_start", WarmStartSettings) == config.warm_start
    assert default_settings("mode", CheckMode, "check") == load(["mode=check"]).mode
    assert default_settings("mode", EvalMode, "eval") == load(["mode=eval"]).mode


def _saved_run(tmp_path: Path, overrides: list[str], drop: list[str]) -> Path:
    """A run folder whose saved config predates the options in `drop` (dotted keys)."""
    cfg = OmegaConf.to_container(compose(overrides))
    for key in drop:
        *parents, last = key.split(".")
        node = cfg
        for parent in parents:
            node = node[parent]
        del node[last]
    record = tmp_path / ".hydra"
    record.mkdir()
    (record / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    (record / "overrides.yaml").write_text(yaml.safe_dump(overrides), encoding="utf-8")
    return tmp_path


def test_a_saved_config_from_before_an_option_takes_its_composed_value(tmp_path: Path) -> None:
    overrides = ["algo=ppo", "service=local", "model=tiny-local", "mode.max_steps=3"]
    dropped = ["algo.shuffle_rewards", "algo.termination.grader_timeout_seconds", "service.tcmalloc", "reproduces"]
    run_dir = _saved_run(tmp_path, overrides, dropped)
    saved = validate_saved(OmegaConf.load(run_dir / ".hydra" / "config.yaml"), run_dir)  # type: ignore[arg-type]
    assert saved == load(overrides)


def test_a_saved_config_takes_nothing_from_another_mode(tmp_path: Path) -> None:
    """Options are only taken from the same mode: an eval run's saved config is not
    completed with the check mode's options, whatever its overrides compose to now."""
    run_dir = _saved_run(tmp_path, ["mode=eval", "policy=oracle"], ["mode.max_concurrency"])
    saved_cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    assert validate_saved(saved_cfg, run_dir).mode == load(["mode=eval", "policy=oracle"]).mode  # type: ignore[arg-type]
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["mode=check"]), encoding="utf-8")
    with pytest.raises(UserError, match=r"mode\.max_concurrency: Field required"):
        validate_saved(saved_cfg, run_dir)  # type: ignore[arg-type]
