"""Pi's shell, the compiled one (shell.c) against its node fallback (shell.cjs): each is
run as Pi runs it (`<shell> -c <command>`, the command socket bound at
/run/piexp/commands.sock by bwrap) against a socket server standing in for piexp's
command runner (a test fixture: it records the request and answers with the frames it
is given), and both must send the same request and relay the same bytes, exit codes and
failures. Pi's episodes themselves play through the compiled shell in every Pi test (the
golden Pi check run replays identically through it)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from piexp.harness.pi.install import find_install, locked_versions
from piexp.harness.pi.sandbox import _SHELL_SCRIPT, pi_shell
from piexp.sandbox.launchers.bwrap import bwrap_path
from tests.harness.conftest import requires_pi

pytestmark = [
    requires_pi,
    pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not on PATH (make setup installs it)"),
]


def frame(kind: int, payload: bytes) -> bytes:
    return bytes([kind]) + struct.pack(">I", len(payload)) + payload


class Runner:
    """A unix socket server: one connection, its request line kept, `reply` sent back."""

    def __init__(self, folder: Path, reply: bytes) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(folder / "commands.sock"))
        self.server.listen(1)
        self.reply = reply
        self.request: dict | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.server.accept()
        with connection:
            line = b""
            while not line.endswith(b"\n"):
                chunk = connection.recv(65536)
                if not chunk:
                    break
                line += chunk
            self.request = json.loads(line)
            # In pieces across the frame boundaries, as a socket may deliver them.
            for start in range(0, len(self.reply), 3):
                connection.sendall(self.reply[start : start + 3])


@pytest.fixture(scope="module")
def shells() -> dict[str, list[str]]:
    install = find_install(locked_versions()["pi"])
    assert install is not None
    compiled = pi_shell()
    assert compiled != _SHELL_SCRIPT, "no C compiler here: Pi's sandbox would use shell.cjs"
    return {"compiled": [compiled], "node": [str(install.node), _SHELL_SCRIPT]}


def run_shell(shell: list[str], folder: Path, command: bytes, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`shell -c command` with `folder` at /run/piexp, as Pi's sandbox binds it."""
    return subprocess.run(
        [bwrap_path(), "--dev-bind", "/", "/", "--bind", str(folder), "/run/piexp", "--", *shell, "-c", command],
        capture_output=True, env={"PATH": "/usr/bin:/bin", **env}, timeout=60, check=False,
    )  # fmt: skip


COMMANDS = [
    b"python solution.py",
    b'echo "quoted \\"text\\"" && cat <<EOF\nline\twith tab\nEOF',
    "unicode: é ß 日本 🐍".encode(),
    b"control \x01\x1f\x7f bytes",
    b"invalid utf-8: \xff \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98 end",
]


@pytest.mark.parametrize("command", COMMANDS, ids=["plain", "quotes-heredoc", "unicode", "control", "invalid-utf8"])
def test_both_shells_send_the_same_request_and_relay_the_same_bytes(
    shells: dict[str, list[str]], tmp_path: Path, command: bytes
) -> None:
    reply = frame(1, b"out \x00 bytes\n" * 3) + frame(2, b"err\n") + frame(1, b"x" * 70000) + frame(3, b"3")
    env = {"PI_SESSION_ID": "session-1", "PI_MODEL": "m", "PI_PROVIDER": ""}
    seen = {}
    for name, shell in shells.items():
        folder = tmp_path / name
        folder.mkdir()
        runner = Runner(folder, reply)
        done = run_shell(shell, folder, command, env)
        runner.thread.join(10)
        seen[name] = (runner.request, done.stdout, done.stderr, done.returncode)
    assert seen["compiled"] == seen["node"]
    request, stdout, stderr, code = seen["compiled"]
    assert request["env"] == {"PI_SESSION_ID": "session-1", "PI_MODEL": "m"}
    assert stdout == b"out \x00 bytes\n" * 3 + b"x" * 70000 and stderr == b"err\n" and code == 3


def test_a_runner_that_closes_before_the_exit_code_and_no_runner_are_failures_of_255(
    shells: dict[str, list[str]], tmp_path: Path
) -> None:
    for name, shell in shells.items():
        folder = tmp_path / name
        folder.mkdir()
        runner = Runner(folder, frame(1, b"partial"))
        cut = run_shell(shell, folder, b"true", {})
        runner.thread.join(10)
        assert (cut.returncode, cut.stdout) == (255, b"partial"), name
        assert cut.stderr == b"piexp: the command runner closed before the command ended\n", name
        absent = tmp_path / f"{name}-absent"
        absent.mkdir()
        unreachable = run_shell(shell, absent, b"true", {})
        assert unreachable.returncode == 255, name
        assert unreachable.stderr.startswith(b"piexp: the command runner is unreachable: "), name


def test_a_killed_command_s_exit_code_is_relayed(shells: dict[str, list[str]], tmp_path: Path) -> None:
    codes = {}
    for name, shell in shells.items():
        folder = tmp_path / name
        folder.mkdir()
        runner = Runner(folder, frame(3, b"137"))
        codes[name] = run_shell(shell, folder, b"sleep 1", {}).returncode
        runner.thread.join(10)
    assert codes == {"compiled": 137, "node": 137}
    assert os.path.basename(shells["compiled"][0]).startswith("piexp-pi-shell-")
