"""The SkyRL server venv for the tests that run a real server.

It is created on first use by piexp's own code (with its progress display), or ahead of
time by `scripts/setup.sh`. Tests that need it are skipped, with the reason stated, only
when it cannot be created because the package index is unreachable; any other failure
to create it fails the tests."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _pypi_reachable() -> bool:
    import httpx

    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    try:
        return httpx.get(f"{index}/skyrl/", timeout=10, follow_redirects=True).status_code < 500
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def server_venv(request: pytest.FixtureRequest) -> Path:
    import contextlib

    from piexp.service.local_venv import ServerVenvError, ensure_server_venv

    capture = request.config.pluginmanager.getplugin("capturemanager")
    # Let the creation's progress display through pytest's output capture (first use only).
    shown = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
    try:
        with shown:
            return ensure_server_venv()
    except ServerVenvError as error:
        if _pypi_reachable():
            raise
        pytest.skip(f"the SkyRL server venv cannot be created here: PyPI is unreachable ({error})")


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from piexp.service.tiny_model import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
def run_backend_script(server_venv: Path, tiny_model: Path):
    """Run a check script in the server venv (argv: launcher, tiny model, variant), with
    the server's allocator and its persistent JAX compilation cache, after loading the
    server-side package and, for the `patched` variant, applying its engine patches
    `patch` (comma-separated names of skyrl_server.ENGINE_PATCHES, applied in that list's
    order); return the JSON the script prints on its `RESULT ` line. A program loaded from
    the cache is the one compiling would give (JAX keys it by the program, shapes, versions
    and CPU); on a warm cache these scripts take about half the CPU."""
    from piexp.allocator import allocator_env
    from piexp.service.compat import run_server_script
    from piexp.service.local_server import compilation_cache_env, default_compilation_cache_dir
    from piexp.service.local_venv import venv_python

    def run(script: str, launcher: Path, variant: str, patch: str) -> dict:
        return run_server_script(
            script, [tiny_model, variant], patches=patch.split(",") if variant == "patched" else (),
            python=venv_python(server_venv), launcher=launcher, timeout_s=900,
            env={**allocator_env()[0], **compilation_cache_env(default_compilation_cache_dir())},
        )  # fmt: skip

    return run


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py as a module (the benches are scripts, not a package), for the tests
    that run a bench whole."""
    path = Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    if str(path.parent) not in sys.path:  # the benches import their shared code (record.py) by name
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
