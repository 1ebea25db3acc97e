"""piexp's built-in families, one module per family, each exporting `FAMILY`.
`BUILTIN_TARGETS` is the catalogue, in registry order (the order of `family=all`): the
import path each built-in's YAML names with `_target_` (tests pin that the two agree), so
the built-ins load through the same `load_family` as any user's family.
"""

from __future__ import annotations

from typing import Any

BUILTIN_TARGETS: dict[str, str] = {
    name: f"piexp.tasks.families.{name}.FAMILY"
    for name in (
        "arith",
        "csv_agg",
        "log_stats",
        "json_tree",
        "graph_paths",
        "grid_search",
        "number_theory",
        "dates",
    )
}


def __getattr__(name: str) -> Any:
    # ALL_FAMILIES: the built-in Family objects, loaded on first use through the registry.
    if name == "ALL_FAMILIES":
        from piexp.tasks.registry import load_family

        return tuple(load_family(family, target) for family, target in BUILTIN_TARGETS.items())
    raise AttributeError(name)
