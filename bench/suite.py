"""Where the test suite's time goes: runs pytest as `make test` does (parallel workers,
whole files each, slow files first) and prints the wall time, the CPU the machine spent
meanwhile and the floor that CPU sets on the wall time (CPU seconds over the cores), then
each test file's share of the time its workers spent in tests and of the CPU its tests
spent (tests/conftest.py's `--cpu-file`: each test's process, the processes it waited for
and the jobs it forked; daemons nobody waits for, such as a job launcher, are not counted).

Usage: `python bench/suite.py [--workers=N] [PYTEST_ARGS ...]` (`--workers`: as `make
test` chooses, one more than the cores, at most 4; PYTEST_ARGS: files or options, the
whole suite by default; run it in a fresh clone to leave this checkout's caches alone).

How to read it. The CPU is the machine's, from /proc/stat (every process's, so run it on
an otherwise idle machine): when it is close to wall x cores, the suite is bound by its
CPU and no order of the files makes it shorter; only less work does. Each file's share is
of the sum of its test phases' wall times over all workers, which on a loaded machine
stretch with the load; the shares, not the seconds, say where the work is.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from machine_cpu import busy_cpu_ms
from record import record
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^\s*([0-9.]+)s (call|setup|teardown)\s+(\S+)")
OUTCOME = re.compile(r"=+ (.*\bin [0-9.]+s.*) =+$|^(\d+ passed.*in [0-9.]+s.*)$")


def per_file(output: str) -> dict[str, float]:
    """Seconds of test phases per test file, from pytest's `--durations=0` table."""
    seconds: dict[str, float] = defaultdict(float)
    for line in output.splitlines():
        found = DURATION.match(line)
        if found:
            seconds[found.group(3).split("::")[0]] += float(found.group(1))
    return dict(seconds)


def cpu_per_file(text: str) -> dict[str, float]:
    """CPU seconds per test file, from tests/conftest.py's `--cpu-file` lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        value, _, nodeid = line.strip().partition(" ")
        if nodeid:
            seconds[nodeid.split("::")[0]] += float(value)
    return dict(seconds)


def failures(output: str, limit: int = 20000) -> str:
    """pytest's failure reports (its FAILURES section, up to `limit` characters) and its
    closing summary: what a failed run needs read, which the durations table would push
    out of a tail."""
    start = next((m.start() for m in re.finditer(r"^=+ FAILURES =+$", output, re.MULTILINE)), None)
    end = next((m.start() for m in re.finditer(r"^=+ slowest durations =+$", output, re.MULTILINE)), None)
    reports = output[start:end][:limit] if start is not None else ""
    closing = [m.start() for m in re.finditer(r"^=+ short test summary info =+$", output, re.MULTILINE)]
    return reports + "\n" + (output[closing[-1] :] if closing else output[-3000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--workers", type=int, default=min(cores, 3) + 1, help="pytest-xdist workers")
    parser.add_argument("--top", type=int, default=25, help="test files listed, most time first")
    args, pytest_args = parser.parse_known_args()
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
        *(["-n", str(args.workers), "--dist", "loadfile", "--no-loadscope-reorder"] if args.workers > 1 else []),
        *pytest_args,
    ]  # fmt: skip
    console = Console()
    console.print(f"running {' '.join(command[1:])} ...")
    with tempfile.TemporaryDirectory(prefix="piexp-suite-") as scratch:
        cpu_file = Path(scratch) / "cpu.txt"
        cpu0, wall0 = busy_cpu_ms(), time.perf_counter()
        done = subprocess.run([*command, f"--cpu-file={cpu_file}"], cwd=REPO, capture_output=True, text=True,
                              check=False)  # fmt: skip
        wall, cpu = time.perf_counter() - wall0, (busy_cpu_ms() - cpu0) / 1e3
        cpu_lines = cpu_file.read_text(encoding="utf-8") if cpu_file.is_file() else ""
        cpu_files = cpu_per_file(cpu_lines)
    outcome = next(
        (m.group(1) or m.group(2) for line in done.stdout.splitlines()[::-1] if (m := OUTCOME.search(line.strip()))),
        f"pytest exited {done.returncode}",
    )
    files = per_file(done.stdout)
    total = sum(files.values())
    summary = Table(title=f"the suite: {outcome}")
    for column in ("wall", "machine CPU", "cores", "CPU floor (CPU / cores)", "wall / floor", "workers"):
        summary.add_column(column)
    floor = cpu / cores
    summary.add_row(f"{wall:.0f} s", f"{cpu:.0f} s", str(cores), f"{floor:.0f} s", f"{wall / max(floor, 1e-9):.2f}",
                    str(args.workers))  # fmt: skip
    shares = Table(title=f"test files by their tests' summed wall time (all workers: {total:.0f} s)")
    for column in ("test file", "seconds", "share", "cumulative share"):
        shares.add_column(column)
    running = 0.0
    for name, seconds in sorted(files.items(), key=lambda item: -item[1])[: args.top]:
        running += seconds
        shares.add_row(name, f"{seconds:.0f}", f"{seconds / total:.1%}", f"{running / total:.1%}")
    attributed = sum(cpu_files.values())
    by_cpu = Table(title=f"test files by their tests' CPU ({attributed:.0f} s, {attributed / max(cpu, 1e-9):.0%} of the "
                         "machine's)")  # fmt: skip
    for column in ("test file", "CPU seconds", "share", "cumulative share"):
        by_cpu.add_column(column)
    running = 0.0
    for name, seconds in sorted(cpu_files.items(), key=lambda item: -item[1])[: args.top]:
        running += seconds
        by_cpu.add_row(name, f"{seconds:.0f}", f"{seconds / max(attributed, 1e-9):.1%}",
                       f"{running / max(attributed, 1e-9):.1%}")  # fmt: skip
    by_test = Table(title="tests by their CPU")
    for column in ("test", "CPU seconds"):
        by_test.add_column(column)
    for line in cpu_lines.splitlines()[: args.top]:
        spent, _, nodeid = line.strip().partition(" ")
        by_test.add_row(nodeid, f"{float(spent):.0f}")
    console.print(summary)
    console.print(shares)
    console.print(by_cpu)
    console.print(by_test)
    if done.returncode not in (0, 5):  # 5: nothing collected
        console.print(failures(done.stdout) + done.stderr[-2000:])
    record(__file__, [summary, shares, by_cpu, by_test])
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
