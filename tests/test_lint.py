"""The code's own checks, run with the tests so CI fails on them: the import layers
written in pyproject.toml (`lint-imports`), the lint rules (`ruff check`), the formatter
(`ruff format --check`) and the type checker (`mypy`), each over the whole configured
tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    executable = BIN / tool
    if not executable.exists():
        pytest.fail(f"{tool} is not installed in {BIN}: pip install -e '.[test]'")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(executable), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_import_layers_are_kept() -> None:
    done = _run("lint-imports", "--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_ruff_is_clean() -> None:
    done = _run("ruff", "check", "--no-cache", "piexp", "tests", "bench", "scripts")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_is_applied() -> None:
    done = _run("ruff", "format", "--check", "--no-cache", "piexp", "tests", "bench", "scripts")
    assert done.returncode == 0, "run `ruff format piexp tests bench scripts`:\n" + done.stdout[-4000:]


def test_mypy_is_clean(tmp_path: Path) -> None:
    done = _run("mypy", "--cache-dir", str(tmp_path / "mypy"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
