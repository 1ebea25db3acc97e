"""Start-up cost of commands that only compose or validate config, and the fixed cost of a
small job.

Prints the median wall time of `python -m piexp ... --cfg job` and of a validation
error, against a bare interpreter and a bare `import hydra` measured in the same run,
and whether heavy modules (torch, transformers, tinker_cookbook, wandb) were imported.
Then the wall time and the CPU (the command and every process it waited for: its
sandbox) of a check and of a 2-task oracle eval, the smallest jobs that play episodes:
nearly all of it is what every job pays before and after its episodes.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from record import record
from rich.console import Console
from rich.table import Table

REPEATS = 5
HEAVY = ("torch", "transformers", "tinker_cookbook", "tinker", "wandb")
JOBS = {
    "piexp mode=check family=arith lang=python": ["mode=check", "family=arith", "lang=python"],
    "piexp mode=eval policy=oracle family=arith lang=python (2 tasks)": [
        "mode=eval", "policy=oracle", "family=arith", "lang=python", "tasks.train_per_family=1",
        "tasks.eval_per_family=2",
    ],
}  # fmt: skip


def timed(argv: list[str], cwd: str, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_job(args: list[str], cwd: str, repeats: int) -> tuple[float, float]:
    """Median wall time and median CPU of `python -m piexp ARGS` in a new run folder each time."""
    walls, cpus = [], []
    for number in range(repeats):
        folder = tempfile.mkdtemp(prefix=f"job-{number}-", dir=cwd)
        argv = [sys.executable, "-m", "piexp", *args, f"hydra.run.dir={folder}/run"]
        cpu, start = children_cpu(), time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - start)
        cpus.append(children_cpu() - cpu)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return statistics.median(walls), statistics.median(cpus)


def heavy_imports(args: list[str], cwd: str) -> list[str]:
    probe = (
        "import sys, contextlib, io\n"
        "from piexp.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        f"        main({args!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True).stdout
    return [m for m in out.strip().splitlines()[-1].split(",") if m] if out.strip() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="starts per command (the median is shown)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        cases = {
            "python -c pass (baseline)": ([sys.executable, "-c", "pass"], None),
            "python -c 'import hydra' (baseline)": ([sys.executable, "-c", "import hydra.main"], None),
            "piexp family=arith lang=python,javascript --cfg job": (
                [sys.executable, "-m", "piexp", "family=arith", "lang=python,javascript", "--cfg", "job"],
                ["family=arith", "lang=python,javascript", "--cfg", "job"],
            ),
            "piexp lang=cobol (validation error)": ([sys.executable, "-m", "piexp", "lang=cobol"], ["lang=cobol"]),
            "piexp --help": ([sys.executable, "-m", "piexp", "--help"], ["--help"]),
        }
        table = Table(title=f"piexp start-up (median of {options.repeats})")
        for column in ("command", "seconds", "x bare python", "heavy modules imported"):
            table.add_column(column)
        base = None
        for name, (argv, args) in cases.items():
            seconds = timed(argv, cwd, options.repeats)
            base = base or seconds
            heavy = heavy_imports(args, cwd) if args is not None else []
            table.add_row(name, f"{seconds:.3f}", f"{seconds / base:.1f}", ", ".join(heavy) or "none")
        Console().print(table)
        jobs = Table(title=f"a small job, whole (median of {options.repeats})")
        for column in ("command", "wall s", "CPU s", "CPU x bare python", "heavy modules imported"):
            jobs.add_column(column)
        for name, args in JOBS.items():
            wall, cpu = timed_job(args, cwd, options.repeats)
            heavy = heavy_imports([*args, f"hydra.run.dir={tempfile.mkdtemp(prefix='probe-', dir=cwd)}/run"], cwd)
            jobs.add_row(name, f"{wall:.2f}", f"{cpu:.2f}", f"{cpu / (base or 1):.0f}", ", ".join(heavy) or "none")
        Console().print(jobs)
    record(__file__, [table, jobs])


if __name__ == "__main__":
    main()
