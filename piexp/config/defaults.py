"""The settings a part of the config has when the command line does not choose them,
read from the YAML under conf/ (its only home): `default_settings("algo", AlgoSettings)`
composes conf/config.yaml without overrides (or with `algo=OPTION`), validates the
`algo` block with its schema and keeps the result for the rest of the process. Code
that needs "the default check settings" or "the default recipe" asks here instead of
constructing a schema model from defaults of its own."""

from __future__ import annotations

import functools
from typing import TypeVar, cast

from omegaconf import OmegaConf
from pydantic import BaseModel

from piexp.config.hydra_compose import compose

SettingsT = TypeVar("SettingsT", bound=BaseModel)


def default_settings(key: str, schema: type[SettingsT], option: str | None = None) -> SettingsT:
    """The top-level config block `key` as conf/config.yaml composes it, with the group
    option `option` when given (`default_settings("mode", CheckMode, "check")`), else the
    option its defaults list selects; validated by `schema`."""
    return cast(SettingsT, _validated(key, schema, option))


@functools.cache
def _validated(key: str, schema: type[BaseModel], option: str | None) -> BaseModel:
    cfg = compose([f"{key}={option}"] if option is not None else [])
    return schema.model_validate(OmegaConf.to_container(cfg[key], resolve=True, throw_on_missing=True))
