"""The schema (`piexp/config/schema.py` and `algo.py`) is the one place a config key's
meaning lives: every key a YAML file under conf/ sets is a schema field with a
description (the config reference is generated from those), and where a key's comment in
conf/ spells out the values it takes (`mode: shaped  # shaped | binary`), they are the
values the schema accepts, so a value added to or dropped from the schema cannot leave a
comment offering a choice that fails, or hiding one that works. A comment may say more
than the description (why that file picks the value); what it lists must hold."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from piexp.config.hydra_compose import compose
from piexp.config.paths import config_dir
from piexp.config.schema import EVAL_POLICIES, CheckMode, EvalMode, RunConfig, TrainMode

CONF = Path(config_dir())
# Keys whose values the schema checks in a validator rather than in the field's type.
VALIDATED_CHOICES: dict[tuple[type[BaseModel], str], tuple[str, ...]] = {(RunConfig, "policy"): EVAL_POLICIES}
MODES: dict[str, type[BaseModel]] = {"train": TrainMode, "eval": EvalMode, "check": CheckMode}
_KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_]\w*):(?P<value>.*?)(?:\s+#\s?(?P<comment>.*))?$")


def _conf_files() -> list[Path]:
    # A family's params are the family's own (its Family declares and checks them).
    return sorted(path for path in CONF.rglob("*.yaml") if path.parent.name != "family")


def _keys(path: Path) -> Iterator[tuple[tuple[str, ...], str, str | None]]:
    """Each key a block mapping of `path` sets: its path, its value as written (empty for
    a nested block) and its comment."""
    open_blocks: list[tuple[int, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _KEY_LINE.match(line)
        if match is None:
            continue
        indent = len(match["indent"])
        while open_blocks and open_blocks[-1][0] >= indent:
            open_blocks.pop()
        keys = (*(key for _, key in open_blocks), match["key"])
        value = match["value"].strip()
        if not value:
            open_blocks.append((indent, match["key"]))
        yield keys, value, match["comment"]


def _loaded_paths(tree: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    if not isinstance(tree, dict):
        return set()
    paths = set()
    for key, value in tree.items():
        paths |= {(*prefix, str(key))} | _loaded_paths(value, (*prefix, str(key)))
    return paths


def _settings(annotation: Any, key: str | None = None) -> tuple[type[BaseModel] | None, bool]:
    """The settings model a field's value is (or, for a `{name: settings}` table, each
    entry is), and whether it is such a table. Of a tagged union's variants (service,
    sandbox), the first that has `key`, the key looked up in it."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if typing.get_origin(annotation) is dict:
        model, _ = _settings(typing.get_args(annotation)[1])
        return model, True
    found: tuple[type[BaseModel] | None, bool] = (None, False)
    for argument in typing.get_args(annotation):
        model, table = _settings(argument, key)
        if model is not None and (key is None or table or key in model.model_fields):
            return model, table
        if found[0] is None:
            found = model, table
    return found


def _variant(group: str, path: Path) -> type[BaseModel]:
    """The settings class of the option `path` of a tagged-union group (its own keys)."""
    annotation = RunConfig.model_fields[group].annotation
    tag, value = next((tag, value) for tag in ("name", "kind") for keys, value, _ in _keys(path) if keys == (tag,))
    for variant in typing.get_args(
        typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation
    ):
        if value in typing.get_args(variant.model_fields[tag].annotation):
            return variant
    raise AssertionError(f"{path}: no {group} variant has {tag}: {value}")


def _schema_field(model: type[BaseModel], keys: tuple[str, ...]) -> tuple[type[BaseModel], FieldInfo] | None:
    """The model and field `keys` name from `model` down; None inside a free-form table."""
    for index, key in enumerate(keys):
        # A field the YAML spells by its alias (harness `_target_`) is found by it.
        fields = {field.alias or name: field for name, field in model.model_fields.items()}
        assert key in fields, f"{'.'.join(keys)}: {model.__name__} has no field {key!r}"
        field = fields[key]
        rest = keys[index + 1 :]
        if not rest:
            return model, field
        inner, table = _settings(field.annotation, rest[0])
        if inner is None:
            return None
        if table:
            return _schema_field(inner, rest[1:]) if rest[1:] else None
        model = inner
    return None


def _accepted(annotation: Any) -> set[str]:
    """The values a field's type accepts, when it lists them (`Literal`, through unions)."""
    if typing.get_origin(annotation) is typing.Literal:
        return {str(value) for value in typing.get_args(annotation)}
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return set().union(*(_accepted(argument) for argument in typing.get_args(annotation)))
    return set()


def _listed_choices(comment: str) -> list[str] | None:
    """`a | b (why) | c; null = ...` (after an optional `label: `) -> [a, b, c]."""
    listed = comment.split(";", 1)[0]
    if listed.count("|") < 1:
        return None
    head, *others = listed.split("|")
    items = [head.rsplit(": ", 1)[-1], *others]
    words = [re.match(r"\s*([a-z_][\w-]*)", item) for item in items]
    if not all(words):
        return None
    return [word[1] for word in words if word]


def _file_keys() -> Iterator[tuple[Path, type[BaseModel], tuple[str, ...], str | None]]:
    """Each key of conf/ with the model its path starts from."""
    for path in _conf_files():
        group = path.relative_to(CONF).parent.parts
        if not group:
            root: type[BaseModel] = RunConfig
        elif group == ("mode",):
            root = MODES[compose([f"mode={path.stem}"]).mode.name]  # a file may take its name from another
        elif group in (("service",), ("sandbox",)):
            root = _variant(group[0], path)  # each option's keys are its own variant's
        else:
            root = RunConfig
        variant_file = group in (("mode",), ("service",), ("sandbox",))
        for keys, _value, comment in _keys(path):
            if keys[0] == "defaults" or (not group and keys[0] == "hydra"):
                continue  # Hydra's own: the defaults list of a file, Hydra's settings
            yield path, root, keys if variant_file else (*group, *keys), comment


def test_the_key_reader_sees_every_key_of_conf() -> None:
    """The line reader the other tests rely on finds what YAML itself loads: every key, or
    the key of the one-line mapping (`weights: {easy: 0.2}`) that holds it."""
    for path in _conf_files():
        read = {keys: value for keys, value, _ in _keys(path)}
        loaded = _loaded_paths(yaml.safe_load(path.read_text(encoding="utf-8")))
        assert set(read) <= loaded, f"{path}: {sorted(set(read) - loaded)}"
        for keys in loaded - set(read):
            assert any(read.get(keys[:cut], "").startswith(("{", "[")) for cut in range(1, len(keys))), (
                f"{path}: the key {'.'.join(keys)} is not seen"
            )


def test_every_key_of_conf_has_a_schema_description() -> None:
    checked = 0
    for path, root, keys, _comment in _file_keys():
        found = _schema_field(root, keys)
        if found is None:
            continue
        model, field = found
        assert field.description, f"{path}: {'.'.join(keys)} ({model.__name__}) has no Field(description=...)"
        checked += 1
    assert checked > 150  # the reader found conf/'s keys


def _list_problem(root: type[BaseModel], keys: tuple[str, ...], comment: str) -> str | None:
    """What is wrong with the values the comment on `keys` lists, if it lists any."""
    choices = _listed_choices(comment)
    found = _schema_field(root, keys)
    if choices is None or found is None:
        return None
    model, field = found
    accepted = set(VALIDATED_CHOICES.get((model, keys[-1]), ())) or _accepted(field.annotation)
    if not accepted:
        return f"{'.'.join(keys)} lists {' | '.join(choices)}, but its schema type names no values to check them by"
    if set(choices) != accepted:
        return (
            f"the comment on {'.'.join(keys)} lists {' | '.join(choices)}; the schema "
            f"({model.__name__}.{keys[-1]}) accepts {' | '.join(sorted(accepted))}"
        )
    return None


def test_choices_a_comment_lists_are_the_values_the_schema_accepts() -> None:
    problems, lists = [], 0
    for path, root, keys, comment in _file_keys():
        lists += _listed_choices(comment or "") is not None
        problem = _list_problem(root, keys, comment or "")
        if problem:
            problems.append(f"{path.relative_to(CONF.parent)}: {problem}")
    assert not problems, "\n".join(problems)
    assert lists >= 5  # the reader found conf/'s lists (reward.mode, algo.loss_fn, ...)


def test_a_stale_list_is_caught() -> None:
    """The check above fails on a comment that offers a value the schema refuses or
    leaves one out, and reads the `label: a (why) | b; null = ...` form."""
    mode = ("reward", "mode")
    assert _list_problem(RunConfig, mode, "shaped | binary") is None
    assert "accepts binary | shaped" in (_list_problem(RunConfig, mode, "shaped | binary | ranked") or "")
    assert (
        _list_problem(RunConfig, mode, "reward: shaped (partial credit); null = shaped") is None
    )  # one value: no list
    assert _list_problem(RunConfig, mode, "reward: shaped (partial credit) | binary; null = x") is None
    policy = _list_problem(RunConfig, ("policy",), "eval policy: oracle | null (no tools) | model")
    assert policy is not None and "accepts" in policy
