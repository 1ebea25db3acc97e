"""The embedded launcher: no orphan server, and refusal to run unisolated by default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

from piexp.sandbox import EmbeddedSandbox
from piexp.sandbox.embedded import free_port

from_here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_dead(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_stops_on_exception():
    with pytest.raises(KeyboardInterrupt):
        with EmbeddedSandbox() as sb:
            pid = sb.proc.pid
            assert httpx.get(sb.base_url + "/v1/ping", trust_env=False).status_code == 200
            assert sb.url.endswith("/run_code") and sb.url.startswith("http://127.0.0.1:")
            raise KeyboardInterrupt
    assert _wait_dead(pid)


def test_server_dies_with_its_parent():
    script = textwrap.dedent("""
        import sys, time
        from piexp.sandbox import EmbeddedSandbox
        sb = EmbeddedSandbox().start()
        print(sb.proc.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=from_here)
    try:
        server_pid = int(parent.stdout.readline())
        assert _alive(server_pid)
        parent.send_signal(signal.SIGKILL)  # no chance to clean up: the kernel must do it
        parent.wait()
        assert _wait_dead(server_pid), "the sandbox server outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def _serve_without_bwrap(*extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env["PATH"] = "/nonexistent"  # no bwrap (and no runtimes) to be found
    return subprocess.Popen(
        [sys.executable, "-m", "piexp.sandbox", "serve", "--port", str(free_port()), *extra],
        env=env,
        cwd=from_here,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_refuses_to_start_without_bwrap():
    proc = _serve_without_bwrap()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "bubblewrap" in out and "allow_unisolated" in out


def test_unisolated_warns_on_start():
    proc = _serve_without_bwrap("--allow-unisolated")
    try:
        deadline = time.monotonic() + 30
        seen = ""
        while time.monotonic() < deadline and "UNISOLATED" not in seen:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert "UNISOLATED" in seen
    finally:
        proc.terminate()
        proc.wait(10)


def test_parallel_sandboxes_each_own_their_port() -> None:
    """The launcher binds the port itself and hands the socket to the server, so servers
    started at once can never be given the same port."""
    sandboxes = [EmbeddedSandbox() for _ in range(3)]
    try:
        for sandbox in sandboxes:
            sandbox.start()
        assert len({sandbox.port for sandbox in sandboxes}) == 3
        for sandbox in sandboxes:
            assert httpx.get(f"{sandbox.base_url}/v1/ping", timeout=5).status_code == 200
    finally:
        for sandbox in sandboxes:
            sandbox.stop()


def test_sandboxed_programs_share_one_cpu_weight() -> None:
    """On cgroup v1 every run joins the server's one cpu cgroup, so many programs weigh
    as one session against the harness; the cgroup goes with the server."""
    import asyncio
    import glob

    from piexp.sandbox.client import close_sandbox_clients, sandbox_client

    if not os.path.isdir("/sys/fs/cgroup/cpu") or not os.access("/sys/fs/cgroup/cpu", os.W_OK):
        pytest.skip("no writable cgroup v1 cpu controller on this host")
    with EmbeddedSandbox() as sandbox:
        share_dir = f"/sys/fs/cgroup/cpu/piexp-sandbox-{sandbox.proc.pid}"
        assert glob.glob(share_dir), "the server made its shared cpu cgroup"

        async def run_and_watch() -> set[str]:
            client = sandbox_client(sandbox.url)
            run = asyncio.create_task(client.run(code="import time; time.sleep(1.5)", timeout=10, language="python"))
            members: set[str] = set()
            for _ in range(40):
                await asyncio.sleep(0.05)
                with open(f"{share_dir}/tasks") as tasks:
                    members |= set(tasks.read().split())
            ok, response = await run
            await close_sandbox_clients()
            assert response["run_result"]["return_code"] == 0, response
            return members

        assert asyncio.run(run_and_watch()), "the running program was in the shared cpu cgroup"
    assert not os.path.exists(share_dir)
