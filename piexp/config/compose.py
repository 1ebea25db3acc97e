"""Compose the Hydra config and turn it into a validated `RunConfig`.

Used before Hydra's own entry point runs (so a bad command writes nothing) and inside
each job. Hydra's and pydantic's errors become one `UserError` paragraph. Composing
itself is `piexp.config.hydra_compose`, below the schema (whose defaults are read from
the composed tree); `compose` and `group_options` are also reached from here.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import itertools
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ValidationError

from piexp.config.hydra_compose import compose, group_options, hydra_error_to_user_error
from piexp.config.languages import check_configured_languages
from piexp.config.schema import RunConfig
from piexp.config.search_path import user_search_path, with_search_path
from piexp.errors import UserError

__all__ = [
    "MAX_VALIDATED_SWEEP_JOBS",
    "compose",
    "declared_sweep",
    "group_options",
    "load",
    "planned_jobs",
    "sweep_combinations",
    "validate",
    "validate_command_line",
    "validate_saved",
]

# Sweeps larger than this are validated on their first combinations only.
MAX_VALIDATED_SWEEP_JOBS = 256


def _union_variants(annotation: Any) -> list[type[BaseModel]]:
    """The settings classes of a tagged union field (`mode`, `service`, `sandbox`); none
    for another field."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return []
    return [arg for arg in typing.get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]


def _tag_key(variant: type[BaseModel]) -> str:
    return str(getattr(variant, "TAG", "name"))  # the modes' tag is `name`


def _variant_tags(field: str) -> set[str]:
    field_info = RunConfig.model_fields.get(field)
    if field_info is None:
        return set()
    return {
        str(value)
        for variant in _union_variants(field_info.annotation)
        for value in typing.get_args(variant.model_fields[_tag_key(variant)].annotation)
    }


def _format_validation_error(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        parts = [str(part) for part in item["loc"] if not str(part).startswith("function-")]
        # A tagged union (mode, service, sandbox) adds the variant's tag to the path; drop it.
        if len(parts) > 1 and parts[1] in _variant_tags(parts[0]):
            del parts[1]
        location = ".".join(parts)
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "is not a known option here"
        value = item.get("input")
        shown = (
            f" (got {value!r})"
            if item["type"] not in ("extra_forbidden", "value_error") and not isinstance(value, dict)
            else ""
        )
        # A message that names its own option (`algo.x ...`) needs no location in front.
        named = not location or message.startswith(f"{location}.")
        problems.append(f"{message}{shown}" if named else f"{location}: {message}{shown}")
    return "Invalid configuration: " + "; ".join(problems) + "."


def validate(cfg: DictConfig, search_path: Sequence[str] | None = None) -> RunConfig:
    """Turn a composed config into a `RunConfig`, or raise one clear `UserError`.
    `search_path`: the config search path it was composed on (None: the running Hydra
    job's), where task files given relative to their YAML are found."""
    from omegaconf.errors import MissingMandatoryValue

    from piexp.config.search_path import anchor_task_file_paths, running_search_path

    plain = {key: value for key, value in cfg.items() if key != "hydra"}
    try:
        data = OmegaConf.to_container(OmegaConf.create(plain), resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as error:
        key = getattr(error, "full_key", None) or str(error)
        raise UserError(f"Invalid configuration: {key} must be set (it has no default).") from None
    if isinstance(data, dict) and isinstance(data.get("family"), dict):
        entries = running_search_path() if search_path is None else search_path
        data["family"] = anchor_task_file_paths(data["family"], entries)
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as error:
        raise UserError(_format_validation_error(error)) from None
    check_configured_languages(config.languages)
    return config


def load(overrides: Sequence[str]) -> RunConfig:
    from piexp.tasks.family import ParamValueError

    try:
        return validate(compose(overrides), user_search_path(with_search_path(overrides)))
    except ParamValueError as error:
        where = _param_origin(error.family, error.param, error.value, overrides)
        raise UserError(error.located(where) if where else str(error)) from None


def _param_origin(family: str, param: str, value: Any, overrides: Sequence[str]) -> str:
    """Where a family parameter's value was set, when not on the command line (which the
    user has in front of them): the family's YAML file (piexp's or the user's, found on
    the search path), or a preset; empty when on the command line or not found."""
    from piexp.config.search_path import family_definitions

    key = f"family.{family}.{param}"
    if any(o.split("=", 1)[0].lstrip("+~") == key for o in overrides):
        return ""
    for path, _target in family_definitions(user_search_path(with_search_path(overrides))).get(family, []):
        try:
            entry = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get(family) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(entry, dict) and entry.get(param) == value:
            return f"set in {path}"
    presets = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+~") == "experiment"]
    if presets:
        return f"set by experiment={presets[-1]}"
    return ""


def sweep_combinations(overrides: Sequence[str]) -> Iterator[list[str]]:
    """The override lists of every job a multirun would launch (basic sweeper semantics)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as error:
        raise hydra_error_to_user_error(error, overrides) from error
    choices: list[list[str]] = []
    for override in parsed:
        if override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([str(override.input_line)])
    yield from (list(combo) for combo in itertools.product(*choices))


def declared_sweep(overrides: Sequence[str]) -> tuple[bool, list[str]]:
    """Whether the composed config asks for a multirun itself (a sweep preset sets
    `hydra.mode: MULTIRUN`), and the sweep params it declares, as overrides."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as error:
        raise hydra_error_to_user_error(error, overrides) from error
    cfg = compose([str(o.input_line) for o in parsed if not o.is_sweep_override()], with_hydra=True)
    mode = str(OmegaConf.select(cfg, "hydra.mode") or "")
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return mode.endswith("MULTIRUN"), [f"{key}={value}" for key, value in params.items()]


def validate_command_line(overrides: Sequence[str], *, multirun: bool) -> list[RunConfig]:
    """Validate every job a command would run, before Hydra creates any folder: the
    command line's sweeps and those a preset declares (the command line wins a key)."""
    return [config for _, config in planned_jobs(overrides, multirun=multirun)]


def planned_jobs(overrides: Sequence[str], *, multirun: bool) -> list[tuple[list[str], RunConfig]]:
    """Each job a command would run, in Hydra's job order: its overrides and its
    validated config (a sweep beyond MAX_VALIDATED_SWEEP_JOBS: its first jobs only)."""
    preset_multirun, declared = declared_sweep(overrides)
    if not (multirun or preset_multirun):
        return [(list(overrides), load(overrides))]
    given = {override.split("=", 1)[0].lstrip("+~") for override in overrides}
    overrides = [d for d in declared if d.split("=", 1)[0] not in given] + list(overrides)
    jobs = []
    for index, combo in enumerate(sweep_combinations(overrides)):
        if index >= MAX_VALIDATED_SWEEP_JOBS:
            break
        try:
            jobs.append((combo, load(combo)))
        except UserError as error:
            raise UserError(f"Sweep job {' '.join(combo)}: {error}") from None
    return jobs


def validate_saved(saved_cfg: DictConfig, run_dir: Path, overrides: Sequence[str] | None = None) -> RunConfig:
    """The validated config `saved_cfg` that the run folder `run_dir` recorded. It is the
    whole config the run composed, but an option added to piexp after the run is absent
    from it: such an option takes the value the run's own overrides compose to now (the
    defaults in conf/ are its only home), as the run, from before it existed, behaved.
    `overrides` are the ones to recompose with (default: the folder's own)."""
    saved: Any = OmegaConf.to_container(saved_cfg, resolve=False)
    try:
        recomposed: Any = OmegaConf.to_container(
            compose(RunFolder(run_dir).overrides() if overrides is None else overrides), resolve=False
        )
    except UserError:
        recomposed = None  # nothing to take missing options from: validation names them
    if isinstance(saved, dict) and isinstance(recomposed, dict):
        saved = _with_missing_fields(saved, recomposed, RunConfig)
        saved["family"] = _with_family_targets(saved.get("family"), recomposed.get("family"))
    try:
        used = RunFolder(run_dir).overrides() if overrides is None else list(overrides)
    except UserError:
        used = []
    return validate(OmegaConf.create(saved), user_search_path(with_search_path(used)))


def _with_family_targets(saved: Any, recomposed: Any) -> Any:
    """A run saved before families named their code with `_target_` ran the built-in of
    that name: its entry takes the `_target_` the same family's YAML gives now."""
    if not isinstance(saved, dict) or not isinstance(recomposed, dict):
        return saved
    filled = {}
    for name, entry in saved.items():
        now = recomposed.get(name)
        if isinstance(entry, dict) and "_target_" not in entry and isinstance(now, dict) and "_target_" in now:
            entry = {"_target_": now["_target_"], **entry}
        filled[name] = entry
    return filled


def _with_missing_fields(saved: dict[str, Any], recomposed: dict[str, Any], schema: type[BaseModel]) -> dict[str, Any]:
    """`saved` with each field of `schema` it lacks taken from `recomposed`, at every level
    of nested settings. Dict-valued tables (families, languages) are not entered: a
    family or language the run did not have is not one of its options."""
    filled = dict(saved)
    for name, field in schema.model_fields.items():
        if name not in recomposed:
            continue
        if name not in filled:
            filled[name] = recomposed[name]
            continue
        mine, theirs = filled[name], recomposed[name]
        if isinstance(mine, dict) and isinstance(theirs, dict):
            nested = _settings_model(field.annotation, mine, theirs)
            if nested is not None:
                filled[name] = _with_missing_fields(mine, theirs, nested)
    return filled


def _settings_model(annotation: Any, saved: dict[str, Any], recomposed: dict[str, Any]) -> type[BaseModel] | None:
    """The settings model of a nested block: the field's model, or for a tagged union
    (mode, service, sandbox) the variant both sides name (another variant has other
    options: none are taken)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for variant in _union_variants(annotation):  # none: a table (families, languages) or a plain value
        tag = _tag_key(variant)
        if tag in variant.model_fields and saved.get(tag) == recomposed.get(tag):
            if saved.get(tag) in typing.get_args(variant.model_fields[tag].annotation):
                return variant
    return None
