"""Benchmark task generation and the train/eval overlap check.

    python bench/tasks.py [--per-family 200] [--sizes 10000,100000]

Generation speed matters because every run (and every `piexp tasks` preview) rebuilds its
splits from the seed instead of storing them. The overlap check must stay linear (one dict
lookup per eval task) so that it can always run, even for very large splits; the ratio of
the 100k to the 10k time should be close to 10.
"""

from __future__ import annotations

import argparse
import gc
import time

from record import RecordingConsole, record
from rich.table import Table

from piexp.tasks import FAMILIES, Task, build_tasks, check_split_overlap


def bench_generation(per_family: int) -> Table:
    table = Table(title=f"task generation ({per_family} tasks per family, split=train)")
    table.add_column("family")
    table.add_column("tasks/s", justify="right")
    table.add_column("ms/task", justify="right")
    table.add_column("mean workspace bytes", justify="right")
    for name in FAMILIES:
        build_tasks("train", 1, 0, [name])  # warm caches (e.g. number_theory's prime list)
        start = time.perf_counter()
        tasks = build_tasks("train", per_family, 1, [name])
        elapsed = time.perf_counter() - start
        size = sum(sum(len(c) for c in t.files.values()) for t in tasks) / len(tasks)
        table.add_row(name, f"{per_family / elapsed:,.0f}", f"{1000 * elapsed / per_family:.2f}", f"{size:,.0f}")
    return table


def _synthetic(split: str, n: int) -> list[Task]:
    """Small distinct tasks: the check's cost depends on the count, not on file sizes
    (digests are computed once when a task is built)."""
    return [
        Task(
            task_id=f"{split}-{i}",
            family="arith",
            split=split,
            instruction="Sum the numbers in `n.txt`.",
            files={"n.txt": f"{split} {i}\n"},
            answer=str(i),
            params={"stream": f"{split}{i}"},
        )
        for i in range(n)
    ]


def bench_overlap(sizes: list[int], repeats: int = 5) -> tuple[Table, list[float]]:
    table = Table(title="overlap check (half train, half eval)")
    table.add_column("tasks", justify="right")
    table.add_column(f"best of {repeats} (s)", justify="right")
    table.add_column("us/task", justify="right")
    times = []
    for n in sizes:
        train, evals = _synthetic("train", n // 2), _synthetic("eval", n - n // 2)
        best = float("inf")
        for _ in range(repeats):
            # As timeit does: a collection triggered by some earlier allocation is noise,
            # not a cost of the check.
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                report = check_split_overlap(train, evals)
                best = min(best, time.perf_counter() - start)
            finally:
                gc.enable()
        assert report.ok
        times.append(best)
        table.add_row(f"{n:,}", f"{best:.4f}", f"{1e6 * best / n:.2f}")
    return table, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-family", type=int, default=200)
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    console = RecordingConsole()
    console.print(bench_generation(args.per_family))
    sizes = [int(s) for s in args.sizes.split(",")]
    table, times = bench_overlap(sizes)
    console.print(table)
    for (n0, t0), (n1, t1) in zip(zip(sizes, times), zip(sizes[1:], times[1:])):
        console.print(
            f"time ratio {n1:,}/{n0:,} tasks = {t1 / t0:.2f} (size ratio {n1 / n0:.0f}; "
            f"linear means about {n1 / n0:.0f}, a pairwise check {(n1 / n0) ** 2:.0f})"
        )
    console.print(
        "[dim]Per-task cost can rise somewhat with size once the dicts and task objects no "
        "longer fit in the CPU caches; the work per task is constant (3 dict lookups).[/dim]"
    )
    record(__file__, console.tables, console.lines)


if __name__ == "__main__":
    main()
