"""Start-up cost of commands that only compose or validate config.

Prints the median wall time of `python -m piexp ... --cfg job` and of a validation
error, against a bare interpreter and a bare `import hydra` measured in the same run,
and whether heavy modules (torch, transformers, tinker_cookbook) were imported.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from record import record
from rich.console import Console
from rich.table import Table

REPEATS = 5
HEAVY = ("torch", "transformers", "tinker_cookbook", "tinker")


def timed(argv: list[str], cwd: str, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, capture_output=True, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


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
    record(__file__, [table])


if __name__ == "__main__":
    main()
