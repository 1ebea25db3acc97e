"""One module per task family; ALL_FAMILIES fixes the registry order (and `family=all`)."""

from piexp.tasks.families import (
    arith,
    csv_agg,
    dates,
    graph_paths,
    grid_search,
    json_tree,
    log_stats,
    number_theory,
)

ALL_FAMILIES = (
    arith.FAMILY,
    csv_agg.FAMILY,
    log_stats.FAMILY,
    json_tree.FAMILY,
    graph_paths.FAMILY,
    grid_search.FAMILY,
    number_theory.FAMILY,
    dates.FAMILY,
)
