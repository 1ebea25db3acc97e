"""Helpers of the sweep tests: piexp as a user runs it (a subprocess in a scratch
working directory) and the smallest offline run (oracle eval, one task per family, no
preflight)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from tests.job_launcher import run_piexp as launch

SMALL = [
    "mode=eval",
    "policy=oracle",
    "tasks.train_per_family=1",
    "tasks.eval_per_family=1",
    "mode.preflight=false",
]


def run_piexp(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "PIEXP_SWEEP_FAIL_JOBS")}
    environment.update(env or {})
    return launch(*args, cwd=cwd, env=environment, timeout=timeout)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass
class SweepRuns:
    sweep_dir: Path
    first: subprocess.CompletedProcess[str]
    first_status: dict
    first_mtimes: dict[str, float]
    second: subprocess.CompletedProcess[str]
