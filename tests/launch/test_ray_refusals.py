"""`rollouts=ray` refused before anything is written (exit 2, one paragraph, no run
folder): without Ray installed, and with an address no cluster answers at, where no
local cluster is started in its place."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from tests.job_launcher import run_piexp

EVAL = ["mode=eval", "policy=oracle", "family=arith", "lang=python", "mode.preflight=false", "rollouts=ray"]


def _piexp(*args: str, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")])
    return run_piexp(*args, env=env, timeout=120)


def test_rollouts_ray_without_ray_says_how_to_install_it(tmp_path: Path) -> None:
    """Ray is an extra: a run asking for it where it is not installed (a `ray` package
    that does not import stands in for its absence) is told the install command."""
    shim = tmp_path / "shim" / "ray"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("No module named ray")\n')
    run_dir = tmp_path / "run"
    done = _piexp(*EVAL, f"hydra.run.dir={run_dir}", pythonpath=str(shim.parent))
    assert done.returncode == 2, done.stderr[-2000:]
    assert 'pip install -e ".[ray]"' in done.stderr and "Traceback" not in done.stderr
    assert not run_dir.exists()


def test_an_address_without_a_cluster_is_refused_within_seconds(tmp_path: Path) -> None:
    """An address nothing listens at: one paragraph naming it, exit 2, no run folder, and
    no cluster started on this machine instead (no raylet of this run is left)."""
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    run_dir = tmp_path / "run"
    started = time.monotonic()
    done = _piexp(*EVAL, f"rollouts.address=127.0.0.1:{port}", f"hydra.run.dir={run_dir}")
    assert time.monotonic() - started < 30
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"No Ray cluster answers at rollouts.address=127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr and "Started a local Ray instance" not in done.stderr
    assert not run_dir.exists()
