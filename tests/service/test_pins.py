"""The one guard for third-party code on the local server's path: every SkyRL name
piexp's server-side code patches or calls (piexp/service/compat/pins.py) is checked in
the real server venv, with skyrl's modules imported as the server imports them, and an
upgrade that moved a name or changed an upstream function piexp copied is refused in
one paragraph naming it, before a server starts. Slow: each check is a fresh server-venv
interpreter importing skyrl's JAX backend (5 s alone, 18 s on a busy 2-core machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from piexp.pinned_hooks import mismatch_paragraph
from piexp.service.compat.pins import SKYRL, skyrl_problems
from piexp.service.local_venv import venv_python

pytestmark = pytest.mark.slow


def test_every_skyrl_hook_fits_the_pinned_release(server_venv: Path) -> None:
    """Slow as the module says: the pins as listed hold for the installed skyrl."""
    assert skyrl_problems(venv_python(server_venv)) == []


def test_a_patched_attribute_moved_by_an_upgrade_is_named(server_venv: Path) -> None:
    """The engine command skyrl's API server builds (launching.py item 2) gone, as a
    release that renamed it would leave it."""
    problems = skyrl_problems(
        venv_python(server_venv), before="import skyrl.tinker.api as api\ndel api._build_uv_run_cmd_engine"
    )
    assert problems == [
        "skyrl.tinker.api._build_uv_run_cmd_engine is missing (moved or renamed), "
        "used by piexp/service/compat/skyrl_server/launching.py item 2"
    ]
    paragraph = mismatch_paragraph(SKYRL, problems)
    assert "\n" not in paragraph and paragraph.startswith("piexp cannot run on the installed skyrl: ")
    assert "listed in piexp/service/compat/pins.py" in paragraph
    assert "python -m piexp.service.local_venv --force" in paragraph


def test_a_changed_upstream_source_of_a_copied_function_is_named(server_venv: Path) -> None:
    """speedups.py item 1 rewrites skyrl's chunked log-probs: a release whose function
    differs (same name and parameters, other code) is refused by the hash of its source."""
    changed = (
        "from skyrl.tx.utils.logits_processor import LogitsProcessorMixin\n"
        "def _compute_chunked_logprobs(self, hidden_states, target_ids, chunk_size, adapter_indices):\n"
        "    return None  # another release's code\n"
        "LogitsProcessorMixin._compute_chunked_logprobs = _compute_chunked_logprobs\n"
    )
    # -c code has no source file to read back: the new function is written to a module.
    before = (
        "import os, sys, tempfile\n"
        "folder = tempfile.mkdtemp()\n"
        f"open(os.path.join(folder, 'another_release.py'), 'w').write({changed!r})\n"
        "sys.path.insert(0, folder)\n"
        "import another_release\n"
    )
    (problem,) = skyrl_problems(venv_python(server_venv), before=before)
    assert problem.startswith(
        "the source of skyrl.tx.utils.logits_processor.LogitsProcessorMixin._compute_chunked_logprobs changed "
        "since piexp copied it (sha256 "
    )
    assert problem.endswith("piexp's copy was made from e6949c47ee31f3a5), used by "
                            "piexp/service/compat/skyrl_server/speedups.py item 1")  # fmt: skip


def test_the_local_path_checks_skyrl_once_per_venv_and_pin_list(
    server_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """service=local's start-up check (open_service) passes on the installed server venv
    and remembers the pass, so the next run's start does not import skyrl again; a
    changed pin list is checked afresh."""
    import dataclasses
    import time

    from piexp.service.compat import pins

    monkeypatch.setenv("PIEXP_CACHE_DIR", str(tmp_path))
    pins.check_service_pins(proxy=True, server_python=venv_python(server_venv))
    (passed,) = (tmp_path / "pin-checks").iterdir()
    started = time.perf_counter()
    pins.check_service_pins(proxy=True, server_python=venv_python(server_venv))
    assert time.perf_counter() - started < 2.0
    monkeypatch.setattr(pins, "SKYRL", dataclasses.replace(pins.SKYRL, version="0.4.1"))
    with pytest.raises(pins.ThirdPartyMismatchError, match=r"skyrl 0\.4\.0 is installed, expected 0\.4\.1"):
        pins.check_service_pins(proxy=True, server_python=venv_python(server_venv))
    assert [path.name for path in (tmp_path / "pin-checks").iterdir()] == [passed.name]


OPEN_SERVICE = r"""
import http.server, sys, threading
from pathlib import Path
from tinker.lib.internal_client_holder import InternalClientHolder
del InternalClientHolder.close  # as a tinker release that renamed it would leave it

class Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}"
from piexp.config.compose import load
from piexp.errors import exit_on_user_error
from piexp.service import open_service

key = "service.base_url" if sys.argv[1] == "tinker" else "service.url"
config = load([f"service={sys.argv[1]}", f"{key}={url}"])

def run():
    with open_service(config, Path(sys.argv[2])):
        print("STARTED")

raise SystemExit(exit_on_user_error(run))
"""


@pytest.mark.parametrize("service", ["tinker", "selfhosted"])
def test_the_tinker_and_selfhosted_paths_refuse_a_moved_sdk_hook_at_start(service: str, tmp_path: Path) -> None:
    """open_service checks the pins on the Tinker and self-hosted paths too (here the
    tinker SDK method the loop calls, deleted in a real SDK in a fresh interpreter):
    one paragraph naming it, exit 2, nothing started. About 15 s: the interpreter
    imports piexp's config and the SDK."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", OPEN_SERVICE, service, str(tmp_path)], capture_output=True, text=True, cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), "TINKER_API_KEY": "tml-test-key-not-used"}, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "STARTED" not in done.stdout and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "tinker.lib.internal_client_holder.InternalClientHolder.close is missing (moved or renamed)" in message
    assert "used by piexp/launch/loop.py (_end_client_sessions)" in message
