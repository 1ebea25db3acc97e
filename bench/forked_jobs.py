"""What a test's piexp job costs started fresh and forked from the tests' job launcher
(tests/job_launcher.py): the same small job (a 2-task oracle eval) run alternately both
ways in one run, each time in a new run folder.

Prints each way's median wall time and CPU per job (the job and every process it waited
for; forked: the launcher's start-up spread over the forked jobs of the run), and the ratio
forked / fresh. The suite runs a few hundred such jobs, most of them forked.

Usage: `python bench/forked_jobs.py [--pairs=N]` (N: jobs each way, alternated; default 6).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from record import record
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import job_launcher  # noqa: E402

JOB = ["mode=eval", "policy=oracle", "family=arith", "lang=python", "tasks.train_per_family=1",
       "tasks.eval_per_family=2", "mode.preflight=false"]  # fmt: skip


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6, help="jobs each way, alternated")
    options = parser.parse_args()
    walls: dict[str, list[float]] = {"fresh": [], "forked": []}
    cpus: dict[str, list[float]] = {"fresh": [], "forked": []}
    with tempfile.TemporaryDirectory() as cwd:
        started = children_cpu()
        launcher = job_launcher._Launcher()
        job_launcher._launcher = launcher
        for number in range(options.pairs):
            for way in ("fresh", "forked"):
                if way == "fresh":
                    os.environ[job_launcher.EXEC_ONLY] = "1"
                else:
                    os.environ.pop(job_launcher.EXEC_ONLY, None)
                folder = f"{cwd}/{way}-{number}"
                cpu, start = children_cpu(), time.perf_counter()
                done = job_launcher.run_piexp(*JOB, f"hydra.run.dir={folder}", cwd=cwd, timeout=600)
                walls[way].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"the {way} job exited {done.returncode}:\n{done.stderr[-3000:]}")
                if way == "fresh":
                    cpus[way].append(children_cpu() - cpu)
        fresh_total = sum(cpus["fresh"])
        launcher.close()  # its CPU and its children's (the forked jobs) count once it is reaped
        forked_total = children_cpu() - started - fresh_total
    forked_per_job = forked_total / options.pairs
    fresh_per_job = statistics.median(cpus["fresh"])
    table = Table(title=f"a 2-task oracle eval, {options.pairs} jobs each way, alternated")
    for column in ("started", "wall s (median)", "CPU s per job", "CPU forked / fresh"):
        table.add_column(column)
    table.add_row("fresh (python -m piexp)", f"{statistics.median(walls['fresh']):.2f}", f"{fresh_per_job:.2f}", "")
    table.add_row(
        "forked (launcher start-up included)",
        f"{statistics.median(walls['forked']):.2f}",
        f"{forked_per_job:.2f}",
        f"{forked_per_job / fresh_per_job:.2f}",
    )
    Console().print(table)
    record(__file__, [table])


if __name__ == "__main__":
    main()
