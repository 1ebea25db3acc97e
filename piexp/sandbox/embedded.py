"""Start the sandbox server as a child process on loopback, for piexp's `sandbox=embedded`."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import fields
from typing import IO, Optional

from .isolation.process import death_signal_exec_prefix
from .settings import SandboxSettings, settings_as_flags

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (for probes of a closed port; servers started
    here use `bound_listening_socket` instead, which cannot race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def bound_listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A socket bound and listening before the server starts. The kernel picks a free
    port (port 0) and it stays reserved while the socket lives, so parallel sweep jobs
    can never be handed the same port (picking a port, closing it and letting the
    server bind it later would race)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


class EmbeddedSandbox:
    """Context manager running `python -m piexp.sandbox serve` on 127.0.0.1.

    The server is its own process group (so stopping it also stops anything it spawned)
    and receives SIGKILL from the kernel if this process dies (PR_SET_PDEATHSIG), so
    neither Ctrl-C, an exception nor a crash of piexp leaves it orphaned.

    Caveat: Linux delivers the parent-death signal when the *thread* that spawned the
    server exits, so start it from a thread that lives as long as the sandbox is used
    (the main thread, in piexp's entry point).

    `env` adds/overrides variables of the server's environment (tests use it to plant a
    fake secret that programs must not see). `.url` is the `/run_code` URL.
    """

    def __init__(
        self,
        settings: Optional[SandboxSettings] = None,
        *,
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        startup_timeout_s: float = 30.0,
        env: Optional[dict[str, str]] = None,
        log_path: Optional[str] = None,
        **setting_overrides,
    ):
        base = settings or SandboxSettings()
        if setting_overrides:
            base = SandboxSettings(**{**{f.name: getattr(base, f.name) for f in fields(base)}, **setting_overrides})
        self.settings = base
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self._log_file: Optional[IO[bytes]] = None
        self._socket: Optional[socket.socket] = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/run_code"

    def _argv(self) -> list[str]:
        assert self._socket is not None, "start() binds the socket first"
        argv = [
            sys.executable,
            "-m",
            "piexp.sandbox",
            "serve",
            "--listen-fd",
            str(self._socket.fileno()),
            "--die-with-parent",
            *settings_as_flags(self.settings),
        ]
        return argv

    def start(self) -> "EmbeddedSandbox":
        self._socket = bound_listening_socket(self.host, self.port or 0)
        self.port = self._socket.getsockname()[1]
        if self.log_path:
            self._log_file = open(self.log_path, "ab")
        try:
            self._spawn()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self) -> None:
        """Start a server on the listening socket and wait until it answers. The socket
        stays open here too, for the sandbox's whole life: a server that dies leaves the
        port reserved, and connections made before a restart wait in its queue for the
        next server instead of being refused."""
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        assert self._socket is not None, "start() binds the socket first"
        self.proc = subprocess.Popen(
            # The parent-death signal from setpriv, not a preexec_fn: a restart runs in a
            # threaded process, whose fork can deadlock before a preexec function runs.
            [*death_signal_exec_prefix(), *self._argv()],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file or subprocess.DEVNULL,
            stderr=self._log_file or None,
            start_new_session=True,
            pass_fds=(self._socket.fileno(),),
        )
        self._wait_ready()

    def restart(self) -> None:
        """Kill the server's process group (whatever state it is in) and start a new
        server on the same port. Call it from a thread that outlives the new server (the
        parent-death signal, see the class docstring)."""
        self._kill_group(signal.SIGKILL, grace_s=0)
        self._spawn()

    def _wait_ready(self) -> None:
        assert self.proc is not None, "start() starts the server first"
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise RuntimeError(
                    f"the embedded sandbox server exited with code {code} before answering; see its log above"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/v1/ping", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(
            f"the embedded sandbox server did not answer {self.base_url}/v1/ping within {self.startup_timeout_s:.0f} s"
        )

    def _kill_group(self, first: signal.Signals, grace_s: float) -> None:
        """Send `first` to the server's process group, SIGKILL after `grace_s`, and reap it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, first)  # the whole group: it outlives a server killed on its own
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after `grace_s`; close the port."""
        self._kill_group(signal.SIGTERM, grace_s)
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "EmbeddedSandbox":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
