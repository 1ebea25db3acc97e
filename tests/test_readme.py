"""The README's examples stay runnable: every `python -m piexp ...` line composes and
validates (`--cfg job`), the offline ones run for real, and `make` targets exist."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
# Commands that need a finished run folder; tests/sweeps, tests/transcripts and
# tests/launch run them on real folders.
NEEDS_RUN_FOLDER = ("summarize", "reproduce", "status", "show", "compare", "rescore", "replay")
# Offline commands that the test runs for real (they need no account and finish fast).
RUN_FOR_REAL = ("mode=check", "policy=oracle", "tasks ")


def readme_commands() -> list[str]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith("python -m piexp ") or line == "python -m piexp":
                commands.append(line)
    return commands


def run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    return subprocess.run(
        [sys.executable, *command[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


def test_readme_has_the_two_commands() -> None:
    assert "make experiment" in README and "make test" in README
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^experiment:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci, ".ci/run must call the README's test command"


@pytest.mark.parametrize("line", readme_commands())
def test_readme_example(line: str, tmp_path: Path) -> None:
    argv = shlex.split(line)
    subcommand = argv[3] if len(argv) > 3 else ""
    if subcommand in NEEDS_RUN_FOLDER:
        pytest.skip(f"`{subcommand}` needs a finished run folder; tests/sweeps runs it on real ones")
    if any(arg.startswith("checkpoint=") and "://" not in arg for arg in argv):
        pytest.skip("checkpoint=<run folder> needs a finished training run; tests/test_checkpoint_source.py")
    if subcommand == "new-family" and "--from-jsonl" in argv:
        pytest.skip("--from-jsonl needs the user's task file; tests/tasks/test_user_families.py runs it")
    real = any(marker in line + " " for marker in RUN_FOR_REAL) and "-m" not in argv
    # new-family and export-harbor write into the test's folder (they have no --cfg).
    if (
        not real
        and subcommand not in ("tasks", "new-family", "export-harbor")
        and "--help" not in argv
        and "--cfg" not in argv
    ):
        argv = [*argv, "--cfg", "job"]
    result = run(argv, tmp_path)
    assert result.returncode == 0, f"{line}\n{result.stderr[-2000:]}"
