"""Which code a family name means: every family, piexp's eight included, is found by
importing the `_target_` its YAML names (a `Family` object, or a callable that takes
`name=` and returns one, such as `TaskFileFamily`). A run's validated config activates
its families here, so the rest of the process (the task builder, the oracle's
references) finds them by name; a name nobody activated falls back to piexp's built-in
catalogue, loaded through the same `load_family`. Import failures, objects that are not
families and name clashes are refused as the user's errors, naming the target and both
origins.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Union

from piexp.errors import UserError
from piexp.tasks.families import BUILTIN_TARGETS
from piexp.tasks.family import Family
from piexp.tasks.task_file import TaskFileFamily

# The key of a family's YAML entry that names its code (Hydra's spelling).
TARGET_KEY = "_target_"

AnyFamily = Union[Family, TaskFileFamily]
FAMILY_TYPES = (Family, TaskFileFamily)

_imported: dict[str, Any] = {}  # target -> the object it names (imports are done once)
_active: dict[str, AnyFamily] = {}  # name -> family of the most recently validated config


def split_entry(entry: Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """A family's YAML entry -> (its `_target_`, its params)."""
    params = dict(entry or {})
    target = params.pop(TARGET_KEY, None)
    return (str(target) if target is not None else None), params


def _import_target(target: str) -> Any:
    path = target.replace(":", ".")
    parts = path.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise ImportError(f"{target!r} is not an import path like package.module.FAMILY")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # Only "this module does not exist" means: try a shorter module path.
            if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
                continue
            raise
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                raise ImportError(f"module {module_name} ({getattr(obj, '__file__', '?')}) has no {attribute!r}")
            obj = getattr(obj, attribute)
        return obj
    raise ModuleNotFoundError(f"no module named {parts[0]!r} (not on PYTHONPATH and not installed)")


def load_family(name: str, target: str) -> AnyFamily:
    """The family `target` names, checked to be one and to be called `name`."""
    where = f"family {name!r}: _target_ {target}"
    if target not in _imported:
        try:
            _imported[target] = _import_target(target)
        except UserError as error:  # a Family() that breaks the protocol, raised at import
            raise UserError(f"{where}: {error}") from None
        except Exception as error:
            raise UserError(
                f"{where} does not import ({type(error).__name__}: {error}). Put the folder holding its "
                "package on PYTHONPATH (PYTHONPATH=DIR python -m piexp ...) or install the package, and check "
                "the spelling: package.module.FAMILY."
            ) from None
    obj = _imported[target]
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, FAMILY_TYPES)):
        try:
            obj = obj(name=name)
        except UserError:
            raise
        except Exception as error:
            raise UserError(f"{where}: calling it with name={name!r} raised {type(error).__name__}: {error}") from None
    if not isinstance(obj, FAMILY_TYPES):
        raise UserError(
            f"{where} is a {type(obj).__name__}, not a family: it must name a piexp.tasks.Family object "
            "(e.g. FAMILY = Family(...) in your module) or piexp.tasks.TaskFileFamily; see docs/families.md."
        )
    if obj.name != name:
        raise UserError(
            f"{where} is the family {obj.name!r}, but its YAML entry calls it {name!r}; use one name for both."
        )
    return obj


def describe_origin(family: AnyFamily, target: str | None) -> str:
    origin = family.origin()
    where = origin.get("path") or origin.get("file")
    package = f", package {origin['package']} {origin['version']}" if origin.get("package") else ""
    return f"{target or '?'} ({where}{package})"


def activate(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[AnyFamily, Any]]:
    """Load the families a config names (`{name: {_target_: ..., params...}}`), check
    their params, and make them the ones this process finds by name. Returns each
    family with its resolved params."""
    resolved: dict[str, tuple[AnyFamily, Any]] = {}
    for name, entry in entries.items():
        target, params = split_entry(entry)
        if target is None:
            raise UserError(
                f"family {name!r} has no {TARGET_KEY}: its YAML entry must name the family's code, e.g. "
                f"`{TARGET_KEY}: my_package.my_module.FAMILY` (see docs/families.md)."
            )
        builtin = BUILTIN_TARGETS.get(name)
        family = load_family(name, target)
        if builtin is not None and target != builtin:
            raise UserError(
                f"family name {name!r} is taken twice: by piexp's built-in "
                f"{describe_origin(load_family(name, builtin), builtin)} and by {describe_origin(family, target)}. "
                "Rename yours (its YAML file, its entry and Family(name=...))."
            )
        resolved[name] = (family, family.make_params(params))
    _active.update({name: family for name, (family, _params) in resolved.items()})
    return resolved


def get_family(name: str) -> AnyFamily:
    """The family a validated config activated under `name`, else the built-in one."""
    if name in _active:
        return _active[name]
    if name in BUILTIN_TARGETS:
        return load_family(name, BUILTIN_TARGETS[name])
    raise UserError(f"unknown task family {name!r}; valid families: {', '.join(sorted({*BUILTIN_TARGETS, *_active}))}")


def known_names() -> list[str]:
    return sorted({*BUILTIN_TARGETS, *_active})


def origin_record(name: str, target: str | None, params: Any) -> dict[str, Any]:
    """The manifest's record of one family: where its code is and digests of what it ran."""
    family = get_family(name)
    record = {"target": target, **family.origin(), "digest": family.digest(params)}
    file_digests = getattr(family, "file_digests", None)  # a generator's files, an imported task's folder
    if file_digests is not None:
        record["files"] = file_digests()
    return record


def is_builtin(name: str, target: str | None) -> bool:
    return BUILTIN_TARGETS.get(name) == target
