"""The zygote launcher's own behaviour (the containment it gives every run is tested by
the whole tests/sandbox suite, which runs against both launchers): a run whose set-up
fails starts no program and says why, malformed requests are refused without harming
the zygote, the zygote and its runs die with the server, a killed zygote is replaced,
and without a C compiler the server falls back to a bwrap per run."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time

import httpx
import pytest

from piexp.sandbox import EmbeddedSandbox
from piexp.sandbox.isolation.layout import SANDBOX_ENV, resolve_runtime, root_layout
from piexp.sandbox.protocol import RunCodeRequest
from piexp.sandbox.runner import Runner, Timings
from piexp.sandbox.settings import SandboxSettings
from piexp.sandbox.spawn import reap_pid
from piexp.sandbox.launchers.zygote_client import RunRequest, TmpSpec, Zygote, ZygoteRefusal, zygote_binary

TMP = TmpSpec("", 1 << 20, 64)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="module")
def compiled(zygote_build_error) -> str:
    if zygote_build_error:
        pytest.skip(zygote_build_error)
    return zygote_binary()


@pytest.fixture
def zygote(tmp_path, compiled):
    z = Zygote.start(str(tmp_path), root_layout([resolve_runtime("python3")]))
    yield z
    z.close()


def _start(zygote: Zygote, run_name: str, argv: list[str]) -> tuple[int, str, bytes]:
    """(exit code, status pipe text, stdout) of one run started directly."""
    out_r, out_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    try:
        code, why = zygote.run_blocking(run_name, argv, [null, out_w, null])
        os.close(out_w)
        out_w = -1
        return code, why, os.read(out_r, 4096)
    finally:
        for fd in (out_r, null, out_w):
            if fd >= 0:
                os.close(fd)


def test_a_run_whose_set_up_fails_starts_no_program_and_says_why(zygote, tmp_path):
    code, why, out = _start(zygote, "no-such-run", ["/bin/echo", "started"])
    assert code == 125 and "bind the run directory" in why and out == b"", (code, why, out)
    os.mkdir(tmp_path / "run")
    code, why, out = _start(zygote, "run", ["/bin/echo", "started"])
    assert (code, why, out) == (0, "", b"started\n")


def test_malformed_requests_are_refused_and_the_zygote_goes_on(zygote, tmp_path):
    os.mkdir(tmp_path / "run")
    for bad in ("../run", ".runs", ""):
        with pytest.raises(ZygoteRefusal, match="malformed"):
            _start(zygote, bad, ["/bin/true"])
    with pytest.raises(ZygoteRefusal):
        zygote.spawn_blocking(RunRequest("run", ["/bin/true"], SANDBOX_ENV, [], TMP, 10, [0, 1]))  # too few fds
    for no_limit in (TmpSpec("", 0, 64), TmpSpec("", 1 << 20, 0)):  # tmpfs reads 0 as "no limit"
        with pytest.raises(ZygoteRefusal):
            zygote.spawn_blocking(RunRequest("run", ["/bin/true"], SANDBOX_ENV, [], no_limit, 10, [0, 1, 2, 2]))
    with pytest.raises(ZygoteRefusal):  # a /tmp outside the runs dir
        zygote.spawn_blocking(
            RunRequest("run", ["/bin/true"], SANDBOX_ENV, [], TmpSpec("../etc", 1, 1), 10, [0, 1, 2, 2])
        )
    assert _start(zygote, "run", ["/bin/echo", "ok"])[2] == b"ok\n"


def test_an_exec_failure_is_reported(zygote, tmp_path):
    os.mkdir(tmp_path / "run")
    code, why, _ = _start(zygote, "run", ["/no/such/binary"])
    assert code == 125 and why.startswith("/no/such/binary: No such file"), why


def _alive(pid: int) -> bool:
    """Running, not a zombie (a test process that made itself a subreaper, by creating a
    Runner in-process, inherits dead servers' children unreaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_zygote_and_its_runs_die_with_the_server(work_dir, compiled, pids_with):
    marker = f"ZYGOTE-DEATH-{os.getpid()}"
    sb = EmbeddedSandbox(work_dir=work_dir, launcher="zygote").start()
    try:
        zygotes = [
            p
            for p in pids_with("piexp-zygote")
            if _alive(p) and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(sb.proc.pid)
        ]
        assert len(zygotes) == 1, "the server has no zygote"
        code = f"import time\nopen('x','w')\n# {marker}\ntime.sleep(60)"

        def post() -> None:
            try:
                httpx.post(
                    sb.url,
                    json={
                        "code": f"import subprocess,sys; subprocess.run([sys.executable, '-c', {code!r}])",
                        "language": "python",
                        "run_timeout": 60,
                    },
                    timeout=90,
                )
            except httpx.HTTPError:
                pass  # the server is killed mid-request: that is the point

        thread = threading.Thread(target=post, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_with(marker), "the run did not start"
        os.kill(sb.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while (pids_with(marker) or any(_alive(z) for z in zygotes)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_with(marker) == [], "the run outlived the server"
        assert not any(_alive(z) for z in zygotes), "the zygote outlived the server"
    finally:
        sb.stop()


def _run(runner: Runner, code: str) -> dict:
    async def go():
        return await runner.run(RunCodeRequest(code=code, language="python"), Timings())

    return asyncio.run(go()).model_dump()


def test_a_killed_zygote_is_replaced_and_the_run_goes_on(work_dir, compiled):
    runner = Runner.create(SandboxSettings(work_dir=work_dir, launcher="zygote"))
    try:
        first = runner.launcher.zygote
        assert first is not None
        first.proc.kill()
        first.proc.wait()
        resp = _run(runner, "print(6 * 7)")
        assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "42\n", resp
        assert runner.launcher.zygote is not None and runner.launcher.zygote is not first
        assert [d for d in os.listdir(runner.host.area.path) if d.startswith("run-")] == []
    finally:
        runner.close()
    assert os.listdir(work_dir) == []


def test_without_a_c_compiler_runs_start_with_a_bwrap_each(tmp_path, work_dir, monkeypatch, caplog):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CC", "/bin/false")
    runner = Runner.create(SandboxSettings(work_dir=work_dir, launcher="zygote"))
    try:
        assert runner.launcher.name == "bwrap"
        assert "zygote unavailable" in caplog.text and "bwrap per run" in caplog.text
        resp = _run(runner, "import os; print(os.getuid())")
        assert resp["run_result"]["stdout"] == "65534\n", resp
    finally:
        runner.close()


def test_prespawn_needs_the_bwrap_launcher(work_dir):
    with pytest.raises(RuntimeError, match="launcher=bwrap"):
        Runner.create(SandboxSettings(work_dir=work_dir, prespawn=1, launcher="zygote"))
    with pytest.raises(ValueError, match="launcher must be one of"):
        SandboxSettings(launcher="docker")


def test_a_caller_cancelled_mid_request_leaves_no_orphan_and_no_stray_answer(zygote, tmp_path, pids_with):
    os.mkdir(tmp_path / "run")
    marker = f"{os.getpid()}.{time.monotonic_ns() % 1000}"

    async def go() -> tuple[int, bytes]:
        null = os.open(os.devnull, os.O_RDWR)
        out_r, out_w = os.pipe()
        try:
            doomed = asyncio.ensure_future(
                zygote.spawn(
                    RunRequest("run", ["/bin/sleep", marker], SANDBOX_ENV, [], TMP, 60, [null, null, null, null])
                )
            )
            await asyncio.sleep(0)  # its request is sent; the answer is not read yet
            doomed.cancel()
            with pytest.raises(asyncio.CancelledError):
                await doomed
            pid = await zygote.spawn(
                RunRequest("run", ["/bin/echo", "second"], SANDBOX_ENV, [], TMP, 60, [null, out_w, null, null])
            )
            os.close(out_w)
            out_w = -1
            code = await asyncio.get_running_loop().run_in_executor(None, reap_pid, pid)
            return code, os.read(out_r, 100)
        finally:
            for fd in (null, out_r, out_w):
                if fd >= 0:
                    os.close(fd)

    assert asyncio.run(go()) == (0, b"second\n")  # the second caller got its own run
    deadline = time.monotonic() + 5
    while pids_with(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_with(f"sleep {marker}") == [], "the cancelled caller's run was left running"
