"""The sandbox package's public names resolve on first use, so the server process
(`python -m piexp.sandbox serve`, one per run) never imports the client's HTTP stack:
about 0.1 s of CPU less each time a run starts its sandbox."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_the_server_imports_no_client_stack() -> None:
    probe = "import sys, piexp.sandbox.server, piexp.sandbox.__main__; print(sorted({'httpx', 'rich', 'piexp.sandbox.client'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_every_public_name_still_resolves_from_the_package() -> None:
    import piexp.sandbox as sandbox
    from piexp.sandbox.client import SandboxClient
    from piexp.sandbox.embedded import EmbeddedSandbox

    assert sandbox.SandboxClient is SandboxClient and sandbox.EmbeddedSandbox is EmbeddedSandbox
    for name in sandbox.__all__:
        assert getattr(sandbox, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        sandbox.no_such_name  # noqa: B018
