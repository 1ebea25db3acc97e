"""One source per default: the YAML under conf/ holds every value, the schema only types,
bounds and descriptions. Code asks `default_settings` for "the default X"."""

from __future__ import annotations

import typing

from pydantic import BaseModel

from piexp.config.algo import AlgoSettings
from piexp.config.compose import load
from piexp.config.defaults import default_settings
from piexp.config.schema import CheckMode, EvalMode, LanguageSettings, RunConfig, ServiceSettings, WarmStartSettings

# The only fields code gives a default: each is absent from some YAML on purpose, and
# None, so no value lives in two places.
CODE_DEFAULTS = {
    (LanguageSettings, "sandbox_language"): None,  # derived from the language registry
    (ServiceSettings, "url"): None,  # only service=selfhosted has one
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
    assert {AlgoSettings, CheckMode, WarmStartSettings} <= models
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
