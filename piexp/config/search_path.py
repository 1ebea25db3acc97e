"""Where families (and any other config group option) are found: Hydra's config search
path. It is piexp's own conf/, then each `hydra.searchpath` entry: a `file://DIR` (what
`--config-dir DIR` becomes, made absolute, so a run works from any folder and its
manifest can say where its families came from), a `pkg://package` of an installed
package, and every package an installed distribution declares in the `piexp.families`
entry-point group (`[project.entry-points."piexp.families"] my_tasks = "my_tasks.conf"`:
installing it is all it takes). All of them are spelled out as one `hydra.searchpath`
override, which the validation's composition and Hydra's own app both read. A family
name defined by two YAML files on that path is refused, selected or not, naming both files.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from piexp.config.paths import config_dir
from piexp.errors import UserError

ENTRY_POINT_GROUP = "piexp.families"
SEARCHPATH_KEY = "hydra.searchpath"
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")

_ASSIGNMENT = re.compile(r"^(?P<key>hydra\.searchpath)=(?P<value>.*)$", re.S)


def entry_point_packages() -> list[str]:
    """Config packages installed distributions declare in the `piexp.families` group."""
    from importlib.metadata import entry_points

    return sorted({entry.module for entry in entry_points(group=ENTRY_POINT_GROUP)})


def _parse_list(value: str) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        (override,) = OverridesParser.create().parse_overrides([f"{SEARCHPATH_KEY}={value}"])
        parsed = override.value()
    except Exception as error:
        raise UserError(f"{SEARCHPATH_KEY}={value} is not a list of search path entries ({error}).") from None
    if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
        raise UserError(f"{SEARCHPATH_KEY} must be a list like ['file:///abs/conf','pkg://my_pkg.conf'], got {value}.")
    return list(parsed)


def user_search_path(overrides: Sequence[str]) -> list[str]:
    """The `hydra.searchpath` entries an override list gives (last one wins, as in Hydra)."""
    entries: list[str] = []
    for override in overrides:
        match = _ASSIGNMENT.match(override)
        if match:
            entries = _parse_list(match["value"])
    return entries


def _quoted(entry: str) -> str:
    if "'" in entry:
        raise UserError(f"The config search path entry {entry} contains a single quote; rename the folder.")
    return f"'{entry}'"


def with_search_path(overrides: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    """`overrides` with one `hydra.searchpath` override holding the user's entries, then
    `extra`, then the entry-point packages (no override at all when there are none)."""
    entries = list(
        dict.fromkeys([*user_search_path(overrides), *extra, *(f"pkg://{p}" for p in entry_point_packages())])
    )
    rest = [override for override in overrides if not _ASSIGNMENT.match(override)]
    if not entries:
        return rest
    return [*rest, f"{SEARCHPATH_KEY}=[{','.join(_quoted(entry) for entry in entries)}]"]


def take_config_dir(argv: Sequence[str]) -> list[str]:
    """`--config-dir DIR` (or `-cd DIR`, `--config-dir=DIR`) -> a `file://` search path
    entry with DIR made absolute, so a job (and a reproduction) finds it from any folder."""
    rest: list[str] = []
    dirs: list[str] = []
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in CONFIG_DIR_FLAGS:
            if index + 1 >= len(args):
                raise UserError(f"{arg} needs a folder: {arg} DIR (DIR/family/NAME.yaml selects family=NAME).")
            dirs.append(args[index + 1])
            index += 2
            continue
        if arg.startswith("--config-dir="):
            dirs.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        index += 1
    if not dirs:
        return rest
    entries = []
    for folder in dirs:
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise UserError(
                f"--config-dir {folder}: {path} is not a folder; give the folder that holds family/NAME.yaml."
            )
        entries.append(f"file://{path}")
    return with_search_path(rest, entries)


def search_folders(entries: Sequence[str]) -> list[Path]:
    """piexp's conf/, then the folder of each search path entry (file:// or pkg://)."""
    folders = [config_dir()]
    for entry in entries:
        if entry.startswith("file://"):
            path = Path(entry.removeprefix("file://"))
            if not path.is_dir():
                raise UserError(
                    f"The config search path entry {entry} is not a folder; fix --config-dir or {SEARCHPATH_KEY}."
                )
            folders.append(path)
        elif entry.startswith("pkg://"):
            package = entry.removeprefix("pkg://").replace("/", ".")
            try:
                spec = importlib.util.find_spec(package)
            except (ImportError, ValueError):
                spec = None
            if spec is None or not spec.submodule_search_locations:
                raise UserError(
                    f"The config search path entry {entry} names no importable package; install it or "
                    "put it on PYTHONPATH."
                )
            folders.extend(Path(location) for location in spec.submodule_search_locations)
    return list(dict.fromkeys(folders))


def group_options(group: str, entries: Sequence[str] = ()) -> list[str]:
    """Every option of a config group on the search path."""
    names: set[str] = set()
    for folder in search_folders(entries):
        names.update(path.stem for path in (folder / group).glob("*.yaml"))
    return sorted(names)


def family_definitions(entries: Sequence[str]) -> dict[str, list[tuple[Path, str | None]]]:
    """Family name -> every (YAML file, its `_target_`) on the search path defining it."""
    found: dict[str, list[tuple[Path, str | None]]] = {}
    for folder in search_folders(entries):
        for path in sorted((folder / "family").glob("*.yaml")):
            for name, target in _defined_families(path, path.stat().st_mtime_ns):
                found.setdefault(name, []).append((path, target))
    return found


@functools.cache
def _defined_families(path: Path, _mtime_ns: int) -> tuple[tuple[str, str | None], ...]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ()  # Hydra reports an unreadable option if it is selected
    if not isinstance(data, dict):
        return ()
    return tuple(
        (str(name), str(entry.get("_target_")) if isinstance(entry, dict) and "_target_" in entry else None)
        for name, entry in data.items()
        if name != "defaults"
    )


def refuse_family_clashes(selected: Sequence[str], overrides: Sequence[str]) -> None:
    """A family name defined by two YAML files on the search path is refused, selected or
    not (which family a name means must not depend on the command line), with the fix that
    fits: a YAML of the user's for one of piexp's names is a built-in's parameters given
    the wrong way (they are `family.NAME.KEY=VALUE` overrides); two of the user's own
    files need one renamed."""
    entries = user_search_path(overrides)
    if not entries:
        return  # piexp's own conf/ alone: one file per family
    definitions = family_definitions(entries)
    clashes = [name for name, places in definitions.items() if len(places) > 1]
    # The selected ones first: the clash the command line is about.
    for name in sorted(clashes, key=lambda name: (name not in selected, name)):
        first, second = definitions[name][:2]
        both = (
            f"Family name {name!r} is defined twice on the config search path: in {first[0]} "
            f"(_target_ {first[1]}) and in {second[0]} (_target_ {second[1]})"
        )
        if first[0].parent.parent == config_dir():
            overrides_hint = (
                f"set them on the command line (or in a preset) as family.{name}.KEY=VALUE (`python -m piexp "
                f"tasks family={name} --params` lists its keys)"
            )
            if second[1] == first[1]:
                raise UserError(
                    f"{both}. {second[0]} targets piexp's own {name}: a built-in's parameters are not changed by "
                    f"a YAML file of the same name. Delete {second[0]} and {overrides_hint}."
                )
            raise UserError(
                f"{both}. {name} is one of piexp's own families: give yours a name of its own (its YAML file, "
                f"its entry and its Family(name=...)). To run piexp's {name} with other parameters instead, "
                f"{overrides_hint}."
            )
        raise UserError(
            f"{both}. Rename one (its YAML file, its entry and its Family(name=...)) or take one folder off the "
            "search path: which one a run gets must not depend on search order."
        )


def anchor_task_file_paths(family: dict[str, Any], entries: Sequence[str]) -> dict[str, Any]:
    """`family` (the composed config's entries) with each task file's relative `path`
    taken from the folder of the YAML file that gives it, where that file exists: a task
    file beside its YAML (or in the config package an installed distribution ships) is
    found from any folder. A path set on the command line, or one the YAML's folder does
    not hold, stays relative to the folder piexp runs in, as before; `pkg://` paths are
    the task file's own to resolve."""
    anchored = dict(family)
    definitions: dict[str, list[tuple[Path, str | None]]] | None = None
    for name, entry in family.items():
        if not isinstance(entry, dict) or not str(entry.get("_target_") or "").endswith(
            ("TaskFileFamily", "HarborTaskFamily")
        ):
            continue
        path = entry.get("path")
        if not isinstance(path, str) or not path or "://" in path or Path(path).expanduser().is_absolute():
            continue
        if definitions is None:
            definitions = family_definitions(entries)
        for yaml_file, _target in definitions.get(name, []):
            try:
                given = ((yaml.safe_load(yaml_file.read_text(encoding="utf-8")) or {}).get(name) or {}).get("path")
            except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError):
                continue
            beside = (yaml_file.parent / path).resolve()
            if given == path and beside.exists():
                anchored[name] = {**entry, "path": str(beside)}
                break
    return anchored


def running_search_path() -> list[str]:
    """The `hydra.searchpath` entries of the Hydra job running now ([] outside a job):
    what the manifest records, so `piexp reproduce` finds the run's families again."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    return [str(entry) for entry in (HydraConfig.get().searchpath or [])]
