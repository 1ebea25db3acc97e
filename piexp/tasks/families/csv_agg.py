"""csv_agg: filter and group rows of a CSV, then compare group totals.

Needs a program: ~150 rows, a header whose column order varies per task (so the columns
must be found by name), a region filter, a returned-flag filter and a group-by. The answer
is computed here from the generated rows, one pass per product, independently of the
references (which parse the CSV and group in a single pass).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from piexp.tasks.families._common import query_file
from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact

REGIONS = ("north", "south", "east", "west", "central", "coastal", "highlands", "islands")
PRODUCTS = (
    "anvil",
    "bolt",
    "cable",
    "drill",
    "easel",
    "fuse",
    "gasket",
    "hinge",
    "inkpad",
    "jack",
    "kettle",
    "ladder",
    "mallet",
    "nozzle",
    "oiler",
    "pulley",
    "quill",
    "rivet",
    "sander",
    "trowel",
    "umbrella",
    "valve",
    "wrench",
    "xylo",
    "yoke",
    "zipper",
)
COLUMNS = ("order_id", "region", "product", "quantity", "unit_price_cents", "returned")


@dataclass(frozen=True)
class CsvAggParams:
    n_rows: int = 150  # data rows in sales.csv
    n_products: int = 8  # distinct product names used
    n_regions: int = 5  # distinct region names used
    max_quantity: int = 50  # quantity is drawn from 1..max_quantity
    max_price_cents: int = 5000  # unit_price_cents is drawn from 1..max_price_cents


def _one_of(names: list[str]) -> str:
    quoted = [f"'{name}'" for name in names]
    return quoted[0] if len(quoted) == 1 else "one of " + ", ".join(quoted)


def _kept(rows: list[dict[str, Any]], chosen: list[str]) -> list[dict[str, Any]]:
    return [row for row in rows if row["region"] in chosen and row["returned"] == "no"]


def _product_totals(kept: list[dict[str, Any]]) -> list[int]:
    """Each kept product's revenue, smallest first, summed over the rows one product at a time."""
    return sorted(
        sum(row["quantity"] * row["unit_price_cents"] for row in kept if row["product"] == product)
        for product in {row["product"] for row in kept}
    )


def generate(rng: random.Random, p: CsvAggParams):
    regions = rng.sample(REGIONS, p.n_regions)
    products = rng.sample(PRODUCTS, p.n_products)
    columns = list(COLUMNS)
    rng.shuffle(columns)
    rows: list[dict[str, Any]] = []
    base = rng.randint(1000, 90000)
    for i in range(p.n_rows):
        rows.append(
            {
                "order_id": str(base + i),
                "region": rng.choice(regions),
                "product": rng.choice(products),
                "quantity": rng.randint(1, p.max_quantity),
                "unit_price_cents": rng.randint(1, p.max_price_cents),
                "returned": "yes" if rng.random() < 0.15 else "no",
            }
        )
    while True:
        chosen = sorted(rng.sample(regions, rng.randint(1, max(1, p.n_regions - 1))))
        kept = _kept(rows, chosen)
        if kept:
            break
    totals = _product_totals(kept)
    answer = totals[-1] - totals[0]
    check_exact("csv_agg", answer, sum(totals))
    lines = [",".join(columns)] + [",".join(str(row[c]) for c in columns) for row in rows]
    instruction = (
        "`sales.csv` is a comma-separated file with a header row (the column order is "
        "given by the header) and one order per line: order_id, region, product, quantity, "
        "unit_price_cents and returned (`yes` or `no`).\n"
        f"Keep only the rows whose region is {_one_of(chosen)} and whose returned "
        "value is `no`. For each kept row, its revenue is quantity * unit_price_cents. Group "
        "the kept rows by product and sum the revenue per product (products with no kept "
        "row are ignored).\n"
        "The answer is the largest product total minus the smallest product total (0 if only "
        "one product has kept rows). The chosen regions are also listed in `query.txt` as "
        "`regions=<comma-separated names>`. Print the answer as a decimal integer."
    )
    files = {"sales.csv": "\n".join(lines) + "\n", "query.txt": query_file(regions=",".join(chosen))}
    return instruction, files, answer, {"regions": chosen, "columns": columns}


FAMILY = Family(
    name="csv_agg",
    summary="CSV rows filtered by region and flag, grouped by product, max minus min total",
    params_type=CsvAggParams,
    limits={
        "n_rows": (5, 400),
        "n_products": (1, len(PRODUCTS)),
        "n_regions": (1, len(REGIONS)),
        "max_quantity": (1, 1000),
        "max_price_cents": (1, 100_000),
    },
    # Larger is harder in each; level 3 is the defaults (`tasks family=csv_agg --params`).
    difficulty=Difficulty(
        harder={"n_rows": 1, "n_products": 1, "n_regions": 1},
        levels=(
            {"n_rows": 10, "n_products": 2, "n_regions": 2},
            {"n_rows": 50, "n_products": 4, "n_regions": 3},
            {"n_rows": 150, "n_products": 8, "n_regions": 5},
            {"n_rows": 250, "n_products": 8, "n_regions": 6},
            {"n_rows": 400, "n_products": 8, "n_regions": 6},
        ),
    ),
    generate=generate,
)
