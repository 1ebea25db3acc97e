"""The server venv's JAX, given :func:`compilation_cache_env`, keeps compiled programs on
CPU: two processes compiling the same program at the same time into one fresh cache both
succeed (the cache is file-locked), and a third one loads the program from the cache
instead of compiling it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROGRAM = r"""
import jax, jax.numpy as jnp

def piexp_probe(x):
    return jnp.tanh(x @ x.T).sum(axis=0)

print(float(jax.jit(piexp_probe)(jnp.arange(4096.0).reshape(64, 64) / 4096).sum()))
"""


def test_second_process_loads_compiled_program_from_shared_cache(server_venv: Path, tmp_path: Path) -> None:
    """Slow: three processes of the server venv start JAX and compile (or load) the same
    program."""
    from piexp.service.local_server import compilation_cache_env
    from piexp.service.local_venv import venv_python

    cache = tmp_path / "jax-cache"
    env = {"JAX_PLATFORMS": "cpu", "JAX_LOG_COMPILES": "1", "PATH": "/usr/bin:/bin", **compilation_cache_env(cache)}
    command = [str(venv_python(server_venv)), "-c", PROGRAM]
    concurrent = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for _ in range(2)]  # fmt: skip
    outputs = [process.communicate(timeout=300) for process in concurrent]
    assert [process.returncode for process in concurrent] == [0, 0], outputs
    assert outputs[0][0] == outputs[1][0]
    assert (cache / ".lockfile").exists()  # the size bound turned JAX's file lock on
    assert any(path.name.startswith("jit_piexp_probe") for path in cache.iterdir())

    third = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
    assert third.stdout == outputs[0][0]
    assert "Persistent compilation cache hit for 'jit_piexp_probe'" in third.stderr
    assert "CACHE MISS for 'jit_piexp_probe'" not in third.stderr
