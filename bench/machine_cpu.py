"""CPU accounting shared by the benchmarks: what the whole machine spends, so that a
run's cost includes every process it touches (server, client, bwrap, kernel workers)."""

from __future__ import annotations

import os
import subprocess
import time


def busy_cpu_ms() -> float:
    """CPU time (ms) the machine has spent busy since boot, from /proc/stat (nan where
    there is no /proc/stat)."""
    try:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    except (OSError, ValueError):
        return float("nan")
    return (user + nice + system + irq + softirq) * 1e3 / os.sysconf("SC_CLK_TCK")


def command_cost(argv: list[str], runs: int, runs_per_call: int = 1) -> tuple[float, float]:
    """(machine CPU ms, wall ms) per run of `argv`, started one after another;
    `runs_per_call`: how many runs one invocation performs by itself."""
    subprocess.run(argv, check=True)  # warm-up
    time.sleep(0.3)
    cpu0, t0 = busy_cpu_ms(), time.perf_counter()
    for _ in range(max(1, runs // runs_per_call)):
        subprocess.run(argv, check=True)
    wall = time.perf_counter() - t0
    time.sleep(0.3)  # let deferred namespace teardown (kernel workers) land in the count
    return (busy_cpu_ms() - cpu0) / runs, wall * 1e3 / runs
