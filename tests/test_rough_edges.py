"""Issue 30's rough edges of a first hour, each as a user meets it: `python -m piexp` in
real subprocesses on real runs (one small offline eval sweep of the `oracle` and `wrong`
policies, made once for the module)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SMALL_EVAL = [
    "mode=eval",
    "family=arith",
    "lang=python",
    "tasks.train_per_family=1",
    "tasks.eval_per_family=2",
    "mode.preflight=false",
]


def piexp(
    cwd: Path, *args: str, stdout: int | None = subprocess.PIPE, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "piexp", *args],
        cwd=cwd,
        env=environment,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def eval_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two offline eval jobs (about 20 s on two cores): job 0 the oracle, job 1 `wrong`."""
    work = tmp_path_factory.mktemp("edges")
    sweep = work / "sweep"
    result = piexp(work, "-m", *SMALL_EVAL, "policy=oracle,wrong", f"hydra.sweep.dir={sweep}")
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep


def closed_pipe_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """piexp writing into a pipe whose reader has already gone (`| head` once it has its
    lines): every write fails, deterministically, however short the output."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return piexp(cwd, *args, stdout=write_end)
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [["tasks", "family=arith", "n=3"], ["show", "{sweep}", "--json"], ["summarize", "{sweep}"], ["--help"]],
    ids=["tasks", "show --json", "summarize", "--help"],
)
def test_a_closed_pipe_ends_quietly(eval_sweep: Path, args: list[str]) -> None:
    """Rough edge 2: `... | head -2` printed a BrokenPipeError traceback."""
    result = closed_pipe_run(eval_sweep.parent, *(arg.format(sweep=eval_sweep) for arg in args))
    assert result.returncode == 141, result.stderr
    assert result.stderr == "", result.stderr


def test_a_real_head_gets_its_lines_and_no_traceback(eval_sweep: Path) -> None:
    pipeline = f"{sys.executable} -m piexp show {eval_sweep} --json | head -2"
    result = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines()[:2] == ["[", " {"]
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
