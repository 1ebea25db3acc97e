"""service=local figures: set-up time, server start time, seconds per RL iteration
(group size 4 x 4 groups, tiny-local model, arith/Python Pi workspace, CPU), peak memory.

* set-up: creating the SkyRL server venv (measured now if it does not exist, else the
  time recorded in its stamp when it was created) and building the tiny model;
* server start: launch to first healthy answer, median of 3 cold starts;
* RL iteration: `time/total` of each iteration in metrics.jsonl of a real 3-iteration
  run (no warm start), first iteration (JAX compilation) reported apart;
* peak memory: the highest sum of resident set sizes of the client (the piexp process)
  and the server (API server + engine), sampled every 0.5 s during that run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

TRAIN = [
    "service=local", "model=tiny-local", "family=arith", "lang=python",
    "tasks.train_per_family=16", "tasks.eval_per_family=2",
    "mode.group_size=4", "mode.groups_per_batch=4", "mode.max_steps=3",
    "mode.save_every=0", "mode.eval_every=0", "mode.preflight=false",
    "limits.max_turns=4", "limits.max_generation_tokens=512",
]  # fmt: skip


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_rss_kb(root_pid: int, marker: str) -> int:
    """RSS of the client process plus every process whose command line names the run
    folder (the server's launcher processes)."""
    total = _rss_kb(root_pid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == root_pid:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"piexp_skyrl_launcher" in cmdline and marker.encode() in cmdline:
            total += _rss_kb(int(entry.name))
    return total


def main() -> int:
    from piexp.service.local_server import LocalServer
    from piexp.service.local_venv import STAMP, ensure_server_venv, server_venv_dir, venv_python
    from piexp.service.tiny_model import ensure_tiny_model

    console = Console()
    rows: list[tuple[str, str]] = []

    existed = (server_venv_dir() / STAMP).is_file()
    started = time.perf_counter()
    venv = ensure_server_venv()
    if existed:
        created = json.loads((venv / STAMP).read_text()).get("created_s")
        rows.append(("server venv creation (recorded at creation)", f"{created} s" if created else "unknown"))
    else:
        rows.append(("server venv creation (now)", f"{time.perf_counter() - started:.1f} s"))
    size = subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True).stdout.split()[0]
    rows.append(("server venv size", f"{size} MB"))

    started = time.perf_counter()
    model = ensure_tiny_model()
    rows.append(("tiny model (build or cache hit)", f"{time.perf_counter() - started:.1f} s"))

    starts = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as state:
            server = LocalServer(python=venv_python(venv), base_model=str(model), state_dir=Path(state))
            with server:
                starts.append(server.start_s or 0.0)
    rows.append(("server start (median of 3)", f"{statistics.median(starts):.1f} s"))

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
        began = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "piexp", *TRAIN, f"hydra.run.dir={run_dir}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        peak = [0]

        def sample() -> None:
            while process.poll() is None:
                peak[0] = max(peak[0], _tree_rss_kb(process.pid, str(run_dir)))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, stderr = process.communicate()
        sampler.join(2)
        wall = time.perf_counter() - began
        if process.returncode != 0:
            console.print(stderr[-4000:])
            return 1
        metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        times = [row["time/total"] for row in metrics if "time/total" in row]
        rows.append(("RL run wall time (3 iterations, incl. server start)", f"{wall:.1f} s"))
        rows.append(("RL iteration 0 (includes JAX compilation)", f"{times[0]:.1f} s"))
        if len(times) > 1:
            rows.append(("RL iteration, later (mean)", f"{statistics.mean(times[1:]):.1f} s"))
        rows.append(("peak RSS, client + server", f"{peak[0] / 1024:.0f} MB"))

    table = Table(title="service=local (SkyRL 0.4.0, JAX on CPU, tiny-local, group size 4 x 4 groups)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
