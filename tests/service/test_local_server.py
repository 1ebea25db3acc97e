"""The local server starts on loopback (allocating with tcmalloc), answers, and leaves no
process behind: neither after stop() nor when the process that started it is killed with
SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie awaiting its reaper counts as gone
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], timeout_s: float = 20) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.2)
    return [pid for pid in pids if _alive(pid)]


def test_start_answer_stop_leaves_nothing(server_venv: Path, tiny_model: Path, tmp_path: Path) -> None:
    """Slow: a real local SkyRL server starts (its JAX engine loads the tiny model on CPU),
    answers, and leaves no process after stop()."""
    import httpx

    from piexp import allocator
    from piexp.allocator import TCMALLOC, allocator_env
    from piexp.service.local_server import LocalServer
    from piexp.service.local_venv import venv_python

    server = LocalServer(python=venv_python(server_venv), base_model=str(tiny_model), state_dir=tmp_path)
    with server:
        assert server.url.startswith("http://127.0.0.1:")
        assert httpx.get(server.url + "/api/v1/healthz", timeout=5).status_code == 200
        deadline = time.monotonic() + 30
        while len(server.pids()) < 2 and time.monotonic() < deadline:  # API server + engine
            time.sleep(0.2)
        pids = server.pids()
        assert len(pids) >= 2
        # It serves on the socket start() bound and handed over (no port race).
        with open(f"/proc/{server.process.pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
        assert b"--listen-fd" in argv and b"--port" in argv
        # Its JAX keeps compiled programs in the machine-wide persistent cache.
        with open(f"/proc/{server.process.pid}/environ", "rb") as handle:
            environ = handle.read().split(b"\0")
        assert f"JAX_COMPILATION_CACHE_DIR={server.compilation_cache_dir}".encode() in environ
        # API server and engine allocate with tcmalloc (scripts/setup.sh installs it); piexp's
        # own process keeps glibc's malloc.
        assert server.allocator == "tcmalloc", "libtcmalloc-minimal4 is missing: run scripts/setup.sh"
        for pid in pids:
            assert TCMALLOC in Path(f"/proc/{pid}/maps").read_text(), pid
        assert TCMALLOC not in Path("/proc/self/maps").read_text()
    assert _wait_gone(pids) == []
    # Asked not to, or where it is not installed, the server keeps glibc's malloc (and
    # adds tcmalloc in front of a preload the user set).
    assert allocator_env(False) == ({}, "glibc malloc")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LD_PRELOAD", "libuser.so")
        assert allocator_env(True) == ({"LD_PRELOAD": f"{TCMALLOC} libuser.so"}, "tcmalloc")
        patch.setattr(allocator, "TCMALLOC", "libpiexp-absent.so.1")
        assert allocator.allocator_env(True) == ({}, "glibc malloc")


def test_killed_parent_takes_the_server_along(server_venv: Path, tiny_model: Path, tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG: SIGKILL the piexp process; API server and engine die too. Slow: a
    real server starts first."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from piexp.service.local_server import LocalServer
        server = LocalServer(python=Path({str(server_venv / "bin" / "python")!r}),
                             base_model={str(tiny_model)!r}, state_dir=Path({str(tmp_path)!r})).start()
        deadline = time.monotonic() + 30
        while len(server.pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        print(" ".join(map(str, server.pids())), flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        pids = [int(pid) for pid in line.split()]
        assert len(pids) >= 2, f"server did not come up: {line!r}"
        assert all(_alive(pid) for pid in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert _wait_gone(pids) == [], "server processes outlived their parent"


def _server_pids(state_dir: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"piexp_skyrl_launcher" in cmdline and str(state_dir).encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def test_ctrl_c_mid_training_stops_in_seconds_with_one_line(
    server_venv: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """SIGINT (Ctrl-C) during the warm start's first step: exit 130 within seconds, one
    line saying how to resume, no traceback, no server process left. Slow: a real run
    starts the server and reaches its first training step before the interrupt."""
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    process = subprocess.Popen(
        [sys.executable, "-m", "piexp", "service=local", "model=tiny-local", "family=arith", "lang=python",
         "warm_start.sft_steps=1", "warm_start.tasks=1", "mode.preflight=false", "mode.max_steps=1",
         "limits.max_turns=4", "limits.max_generation_tokens=512", f"hydra.run.dir={run_dir}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's foreground job
    )  # fmt: skip
    log = run_dir / "local_service" / "server.log"
    deadline = time.monotonic() + 300
    while not (log.is_file() and "JIT compiling for train" in log.read_text(errors="replace")):
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its first SFT step"
        time.sleep(0.5)
    servers = _server_pids(run_dir / "local_service")
    assert servers
    interrupted = time.monotonic()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-3000:]
    assert time.monotonic() - interrupted < 15
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"piexp: interrupted; nothing is left running. Resume with the same command and hydra.run.dir={run_dir}"
    )
    assert _wait_gone(servers, timeout_s=5) == []
