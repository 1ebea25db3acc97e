"""The offline training run in a terminal, as a user sees it: on a pseudo-terminal (where
tinker-cookbook's rich console styles its output with ANSI codes) the progress line counts
the steps, the cookbook's metric tables and its config dump stay out of the console (in
job.log and the cookbook's logs.log), no log file holds an ANSI code, and no warning of a
third party (torch, matplotlib) reaches the console."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest

from piexp.console import plain

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# The default run's path (preflight, an evaluation at step 0, two steps, the cookbook's
# tables and config dump) at the smallest batch: what reaches the console does not
# depend on how many episodes a step plays, and the default batch of 8 groups of 4 made
# this test about 3x as long.
COMMAND = ["service=local", "model=tiny-local", "family=arith", "lang=python", "mode.max_steps=2",
           "mode.group_size=2", "mode.groups_per_batch=2", "tasks.eval_per_family=2",
           "limits.max_generation_tokens=512"]  # fmt: skip


def _in_a_terminal(args: list[str], timeout_s: float) -> tuple[int, str]:
    """Run `python -m piexp ARGS` on a pseudo-terminal; its exit status and what it printed."""
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="120", TERM="xterm-256color")
    pid, fd = pty.fork()
    if pid == 0:  # the child: piexp, its stdout and stderr the terminal
        os.chdir(ROOT)
        os.execvpe(sys.executable, [sys.executable, "-m", "piexp", *args], env)
    out = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # the terminal closed: piexp has exited
                    break
                if not data:
                    break
                out += data
        else:
            os.kill(pid, 9)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", errors="replace")


def test_training_in_a_terminal_counts_steps_and_keeps_tables_and_colours_in_their_place(server_venv, tmp_path):
    """The offline training run (2 steps of tiny-local on arith, Python) on a
    pseudo-terminal: 42 s alone on the 2-core machine (59 s of CPU)."""
    run_dir = tmp_path / "run"
    code, console = _in_a_terminal([*COMMAND, f"hydra.run.dir={run_dir}"], timeout_s=1500)
    shown = plain(console).replace("\r", "\n")  # as a person reads it: rich styles numbers and paths
    assert code == 0, shown[-4000:]
    assert "training: 2/2 steps (100%)" in shown, shown[-4000:]
    assert "step 0, reward" in shown and "step 1, reward" in shown
    # The cookbook's tables and config dump: in the log files, not on the console.
    for kept_out in ("env/all/total_episodes", "Metric", "Configuration:", "learning_rate:"):
        assert kept_out not in shown, kept_out
    job_log, cookbook_log = (run_dir / "job.log").read_text(), (run_dir / "logs.log").read_text()
    assert "Step 1" in job_log and "env/all/total_episodes" in job_log and "Configuration:" in job_log
    assert "training: 2/2 steps" in job_log
    assert "\x1b" not in job_log and "\x1b" not in cookbook_log
    assert "Wrote metrics to" in cookbook_log  # the cookbook's own log file still holds its records
    assert "Warning" not in shown, [line for line in shown.splitlines() if "Warning" in line]
