"""The SkyRL server venv for the tests that run a real server.

It is created on first use by piexp's own code (with its progress display), or ahead of
time by `scripts/setup.sh`. Tests that need it are skipped, with the reason stated, only
when it cannot be created because the package index is unreachable; any other failure
to create it fails the tests."""

from __future__ import annotations

import os
from pathlib import Path

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
    the server's allocator, after loading the launcher and, for the `patched` variant,
    applying its `patch` functions (comma-separated, in order);
    return the JSON the script prints on its `RESULT ` line."""
    import json
    import subprocess

    from piexp.service.local_venv import venv_python

    def run(script: str, launcher: Path, variant: str, patch: str) -> dict:
        from piexp.allocator import allocator_env
        from piexp.service.compat import launcher_preamble

        preamble = launcher_preamble() + "if sys.argv[3] == 'patched':\n"
        preamble += "".join(f"    launcher.{name}()\n" for name in patch.split(","))
        result = subprocess.run(
            [str(venv_python(server_venv)), "-c", preamble + script, str(launcher), str(tiny_model), variant],
            capture_output=True, text=True, timeout=900, check=False,
            env={"JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                 **allocator_env()[0]},  # the server's allocator (the same values, faster)
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-4000:]
        line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
        return json.loads(line.removeprefix("RESULT "))

    return run
