"""piexp's built-in families, one module per family, each exporting `FAMILY`.
`BUILTIN_TARGETS` is the catalogue, in registry order (the order of `family=all`): the
import path each built-in's YAML names with `_target_` (tests pin that the two agree), so
the built-ins load through the same `load_family` as any user's family (`piexp.tasks.FAMILIES`
holds them loaded).
"""

from __future__ import annotations

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
