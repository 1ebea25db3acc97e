"""Tests for the Tinker preflight, secret redaction and the run manifest.

All network traffic stays on 127.0.0.1: a closed port for "unreachable" and a tiny
http.server in a thread for "reachable".
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from piexp import redaction
from piexp.errors import ServiceUnavailableError
from piexp.launch import manifest as mf
from piexp.service import tinker_preflight

FAKE_KEY = "tml-FAKE-secret-key-0123456789abcdef"


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    return FAKE_KEY


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


class _Handler(http.server.BaseHTTPRequestHandler):
    paths: list[str] = []
    headers_seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        type(self).paths.append(self.path)
        type(self).headers_seen.append(str(self.headers))
        self.send_response(401)  # "not authorised" still proves the service answers
        self.end_headers()
        self.wfile.write(b'{"detail": "unauthorized"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_server() -> Iterator[str]:
    _Handler.paths = []
    _Handler.headers_seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/base"
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- preflight


@pytest.mark.parametrize("value", [None, "", "   "])
def test_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("TINKER_API_KEY", raising=False)
    else:
        monkeypatch.setenv("TINKER_API_KEY", value)
    with pytest.raises(ServiceUnavailableError) as info:
        tinker_preflight.preflight_tinker("http://127.0.0.1:9", timeout_s=1)
    msg = str(info.value)
    assert "TINKER_API_KEY" in msg and "export" in msg
    assert "mode=eval policy=oracle" in msg and "mode=check" in msg
    assert "\n" not in msg  # one paragraph
    assert info.value.exit_code == 3
    with pytest.raises(ServiceUnavailableError):
        tinker_preflight.require_api_key()


def test_closed_port_fails_fast(api_key: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    timeout = 2.0
    start = time.monotonic()
    with pytest.raises(ServiceUnavailableError) as info:
        tinker_preflight.preflight_tinker(url, timeout_s=timeout)
    assert time.monotonic() - start < timeout + 2
    msg = str(info.value)
    assert url + tinker_preflight.HEALTH_PATH in msg and "2 s" in msg
    assert api_key not in msg


def test_unanswering_server_is_bounded(api_key: str) -> None:
    """A listener that accepts but never replies must not hang the launch."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(ServiceUnavailableError):
            tinker_preflight.preflight_tinker(url, timeout_s=0.5)
        assert time.monotonic() - start < 0.5 + 2


def test_reachable_server_passes(api_key: str, local_server: str) -> None:
    tinker_preflight.preflight_tinker(local_server, timeout_s=5)
    assert _Handler.paths == ["/base" + tinker_preflight.HEALTH_PATH]
    # The probe does not send the key anywhere.
    assert all(api_key not in h for h in _Handler.headers_seen)


def test_base_url_from_env(api_key: str, local_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_BASE_URL", local_server + "/")
    tinker_preflight.preflight_tinker(None, timeout_s=5)
    assert _Handler.paths == ["/base" + tinker_preflight.HEALTH_PATH]


def test_default_base_url_matches_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinker.lib.base_url import DEFAULT_BASE_URL

    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    assert tinker_preflight.DEFAULT_TINKER_BASE_URL == DEFAULT_BASE_URL
    assert tinker_preflight.resolve_base_url(None) == DEFAULT_BASE_URL
    assert tinker_preflight.resolve_base_url("http://x/") == "http://x"


# --------------------------------------------------------------------------- redaction


def test_redact_secrets(api_key: str) -> None:
    cfg = {
        "api_key": "abc",
        "apiKey": "abc",
        "service": {"TINKER_API_KEY": "whatever", "base_url": "http://x", "token": None},
        "hf_token": "hf_x",
        "db_password": "pw",
        "client_secret": "s",
        "use_auth": True,
        "max_tokens": 512,
        "tokenizer": "Qwen/Qwen3-8B",
        "eos_token": "<|im_end|>",
        "sort_keys": True,
        "note": f"Bearer {api_key}",
        "copy": api_key,
        "items": [api_key, ("x", api_key)],
    }
    out = redaction.redact_secrets(cfg)
    assert out["api_key"] == out["apiKey"] == redaction.REDACTED
    assert out["service"] == {"TINKER_API_KEY": redaction.REDACTED, "base_url": "http://x", "token": None}
    assert out["hf_token"] == out["db_password"] == out["client_secret"] == redaction.REDACTED
    assert out["max_tokens"] == 512 and out["tokenizer"] == "Qwen/Qwen3-8B"
    assert out["eos_token"] == "<|im_end|>" and out["sort_keys"] is True and out["use_auth"] is True
    assert out["note"] == "Bearer <redacted>" and out["copy"] == redaction.REDACTED
    assert out["items"] == [redaction.REDACTED, ["x", redaction.REDACTED]]
    assert cfg["api_key"] == "abc"  # input untouched


def test_short_api_key_redacted_when_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "k1")
    assert redaction.redact_secrets({"a": "k1", "b": "k10"}) == {"a": redaction.REDACTED, "b": "k10"}


# --------------------------------------------------------------------------- manifest


def test_build_manifest_fields() -> None:
    digests = {"train": ["d1", "d2"], "eval": ["d3"]}
    report = {"ok": True, "counts": {"train": 2, "eval": 1}}
    m = mf.build_manifest(seed=7, task_digests=digests, overlap_report=report, extra={"mode": "train"})
    assert m["seed"] == 7 and m["task_digests"] == digests and m["overlap_report"] == report
    assert m["task_counts"] == {"train": 2, "eval": 1}
    assert m["mode"] == "train"
    assert set(mf.TRACKED_PACKAGES) <= set(m["packages"])
    assert m["packages"]["tinker-cookbook"] == "0.5.8"
    assert m["python"].count(".") == 2 and m["platform"]
    assert m["created_utc"].endswith("+00:00")
    repo = Path(mf.__file__).resolve().parents[2]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    if head.returncode == 0:
        assert m["git_commit"] == head.stdout.strip()
        assert isinstance(m["git_dirty"], bool)
    with pytest.raises(ValueError):
        mf.build_manifest(seed=1, task_digests={}, overlap_report={}, extra={"seed": 2})


def test_torch_is_not_imported() -> None:
    code = (
        "import sys; from piexp.launch.manifest import build_manifest; "
        "build_manifest(seed=0, task_digests={}, overlap_report={}); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    import sys

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_git_state_outside_checkout(tmp_path: Path) -> None:
    pkg = tmp_path / "venv" / "site-packages" / "piexp"
    pkg.mkdir(parents=True)
    assert mf.git_state(pkg) == {"commit": None, "dirty": None}
    # An installed copy inside some other repository must not report that repository.
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert mf.git_state(pkg) == {"commit": None, "dirty": None}


def test_write_manifest_atomic_sorted_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api_key: str) -> None:
    other = "wandb-SECRET-value-987654321"
    monkeypatch.setenv("WANDB_API_KEY", other)
    m = mf.build_manifest(
        seed=1,
        task_digests={"train": ["a"], "eval": ["b"]},
        overlap_report={"ok": True},
        extra={
            "config": {"service": {"api_key": api_key, "base_url": "http://x"}, "note": f"k={other}"},
            "path": tmp_path,
        },
    )
    path = mf.write_manifest(tmp_path / "run", m)
    assert path == tmp_path / "run" / "manifest.json"
    text = path.read_text(encoding="utf-8")
    assert api_key not in text and other not in text
    assert "<redacted>" in text
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["config"]["service"]["base_url"] == "http://x"
    assert data["path"] == str(tmp_path)
    assert [p.name for p in path.parent.iterdir()] == ["manifest.json"]  # no temp file left
    # Rewriting replaces the file whole.
    mf.write_manifest(tmp_path / "run", {"seed": 2})
    assert json.loads(path.read_text()) == {"seed": 2}


def test_the_working_directory_is_not_taken_for_a_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """PWD and OLDPWD end in `pwd` but hold folders: a run record naming a family's file
    or a config folder under them must keep its path (manifests and `reproduce` read it back)."""
    monkeypatch.setenv("PWD", "/home/someone/experiments")
    monkeypatch.setenv("OLDPWD", "/home/someone/tasks")
    monkeypatch.setenv("DB_PASSWORD", "hunter2-hunter2")
    record = {"file": "/home/someone/tasks/collatz.py", "note": "login hunter2-hunter2"}
    assert redaction.redact_secrets(record) == {"file": "/home/someone/tasks/collatz.py", "note": "login <redacted>"}
