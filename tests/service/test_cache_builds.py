"""Cache entries that concurrent runs share (a parallel sweep, two evals, test workers
on a fresh machine) are built by one process while the others wait on the entry's lock,
then found complete: the tiny model and the SkyRL server's venv."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from piexp.files import exclusive_lock
from piexp.service.local_venv import server_venv_dir
from piexp.service.tiny_model import _build_tiny_model, tiny_model_dir


def test_a_second_tiny_model_builder_waits_for_the_first_and_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs on a fresh machine (a parallel sweep, test workers) once shared one staging
    folder: a builder that finds the cache's build lock held waits for it, then finds the
    model complete and leaves it as it is."""
    env = {**os.environ, "PIEXP_CACHE_DIR": str(tmp_path)}
    probe = "from piexp.service.tiny_model import ensure_tiny_model; print(ensure_tiny_model())"
    monkeypatch.setenv("PIEXP_CACHE_DIR", str(tmp_path))
    target = tiny_model_dir()
    with exclusive_lock(target.parent / f".{target.name}.lock"):  # this test is the first builder
        second = subprocess.Popen([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, text=True)
        time.sleep(6.0)  # ample time to import and build (about 3 s alone) were it not waiting
        assert (
            second.poll() is None and not target.exists() and not target.with_name(f".{target.name}.building").exists()
        )
        _build_tiny_model(target)
    mtime = (target / "model.safetensors").stat().st_mtime_ns
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and out.strip() == str(target)
    assert (target / "model.safetensors").stat().st_mtime_ns == mtime  # found complete, not built again


def test_a_server_venv_builder_waits_while_another_holds_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the lock, a second run deleted and refilled the folder the first was
    filling. While the lock is held, a second `ensure_server_venv` creates nothing."""
    monkeypatch.setenv("PIEXP_CACHE_DIR", str(tmp_path))
    venv = server_venv_dir()
    env = {**os.environ, "PIEXP_CACHE_DIR": str(tmp_path)}
    probe = "from piexp.service.local_venv import ensure_server_venv; ensure_server_venv(quiet=True)"
    with exclusive_lock(venv.parent / f".{venv.name}.lock"):
        second = subprocess.Popen([sys.executable, "-c", probe], env=env, stderr=subprocess.DEVNULL)
        try:
            time.sleep(6.0)  # a builder that does not wait makes the folder within a second or two
            assert second.poll() is None and not venv.exists()
        finally:
            second.kill()
            second.wait(timeout=30)
