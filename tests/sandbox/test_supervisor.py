"""The supervised embedded sandbox, with real kills: a server killed with SIGKILL or
frozen with SIGSTOP is restarted on the same port with its cause reported, a program in
flight when it died still gets its answer, and past `max_restarts` the URL is marked
down, so clients fail at once instead of scoring programs that cannot run."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time

import pytest

from piexp.sandbox import EmbeddedSandbox
from piexp.sandbox.availability import SandboxDown, check_sandbox, down_reason
from piexp.sandbox.client import close_sandbox_clients, sandbox_client
from piexp.sandbox.supervisor import RestartPolicy, SupervisedSandbox, exit_cause

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

LAUNCHERS = ["zygote", "bwrap"]


def _supervised(launcher: str, reports: list[str], **policy: float) -> SupervisedSandbox:
    # A long health time-out unless a test is about it: a loaded machine can delay a ping.
    fast = {"health_interval_s": 0.2, "health_timeout_s": 60.0, **policy}
    return SupervisedSandbox(EmbeddedSandbox(launcher=launcher), RestartPolicy(**fast), report=reports.append)  # type: ignore[arg-type]


async def _run(url: str, code: str, timeout: float = 10) -> tuple[bool, dict]:
    try:
        return await sandbox_client(url).run(code=code, timeout=timeout, language="python")
    finally:
        await close_sandbox_clients()


def _stdout(answer: tuple[bool, dict]) -> str:
    answered, response = answer
    assert answered and response.get("status") == "Success", response
    return str(response["run_result"]["stdout"]).strip()


def test_exit_causes_are_named():
    assert exit_cause(-signal.SIGKILL) == "killed by SIGKILL"
    assert exit_cause(3) == "exited with status 3"


@needs_bwrap
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_killed_server_is_restarted_on_its_port_and_a_run_in_flight_is_answered(launcher, wait_until):
    reports: list[str] = []
    with _supervised(launcher, reports) as sandbox:
        url, first_pid = sandbox.url, sandbox.sandbox.proc.pid

        async def killed_mid_run() -> tuple[bool, dict]:
            run = asyncio.create_task(
                sandbox_client(url).run(code="import time; time.sleep(1.5); print(42)", timeout=20, language="python")
            )
            await asyncio.sleep(0.7)  # the program is running in the first server
            os.kill(first_pid, signal.SIGKILL)
            try:
                return await run
            finally:
                await close_sandbox_clients()

        assert _stdout(asyncio.run(killed_mid_run())) == "42", "the run in flight was retried on the new server"
        wait_until("the restart report", lambda: reports, timeout=30)
        assert sandbox.restarts == 1 and sandbox.sandbox.proc.pid != first_pid
        assert "killed by SIGKILL" in reports[0] and f"port {sandbox.sandbox.port}" in reports[0]
        assert sandbox.url == url and down_reason(url) is None
        assert _stdout(asyncio.run(_run(url, "print(6 * 7)"))) == "42"


@needs_bwrap
def test_a_server_that_stops_answering_is_restarted(wait_until):
    reports: list[str] = []
    with _supervised("zygote", reports, health_timeout_s=1.5) as sandbox:
        frozen = sandbox.sandbox.proc.pid
        os.kill(frozen, signal.SIGSTOP)  # alive, but answers nothing
        wait_until("the restart of a frozen server", lambda: reports, timeout=30)
        assert "answered no health check for 1.5 s" in reports[0]
        assert _stdout(asyncio.run(_run(sandbox.url, "print(1)"))) == "1"
        with pytest.raises(ProcessLookupError):  # the frozen server was killed, not left behind
            for _ in range(100):
                os.kill(frozen, 0)
                time.sleep(0.05)


@needs_bwrap
def test_past_its_restart_bound_the_sandbox_is_marked_down_and_clients_fail_at_once(wait_until):
    reports: list[str] = []
    with _supervised("zygote", reports, max_restarts=1, window_s=600) as sandbox:
        url = sandbox.url
        os.kill(sandbox.sandbox.proc.pid, signal.SIGKILL)
        wait_until("the first restart", lambda: reports, timeout=30)
        os.kill(sandbox.sandbox.proc.pid, signal.SIGKILL)
        reason = wait_until("the sandbox marked down", lambda: down_reason(url), timeout=30)
        assert "after 1 restarts within 600 s (sandbox.max_restarts=1)" in reason
        assert "the run stops" in reports[-1]
        started = time.monotonic()
        answered, response = asyncio.run(_run(url, "print(1)"))
        assert not answered and "max_restarts" in response["message"]
        assert time.monotonic() - started < 1.0, "a sandbox marked down is not retried"
        with pytest.raises(SandboxDown):
            check_sandbox(url, within_s=5)


class _KilledWhileStarting(EmbeddedSandbox):
    """An embedded sandbox whose first `kills` servers are killed (SIGKILL) before they answer."""

    def __init__(self, kills: int) -> None:
        super().__init__(launcher="zygote")
        self.kills = kills

    def _wait_ready(self) -> None:
        if self.kills and self.proc is not None:
            self.kills -= 1
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        super()._wait_ready()


def test_a_server_killed_before_it_first_answers_is_started_again_within_the_bound():
    reports: list[str] = []
    supervised = SupervisedSandbox(_KilledWhileStarting(kills=1), RestartPolicy(max_restarts=2), report=reports.append)
    with supervised:
        assert supervised.restarts == 1
        (line,) = reports
        assert "exited with code -9 before answering" in line and "starting it again (restart 1 of at most 2" in line
        assert _stdout(asyncio.run(_run(supervised.url, "print(6 * 7)"))) == "42"
    # Past the bound the start fails as it did unsupervised: nothing runs on a dead server.
    with pytest.raises(RuntimeError, match="exited with code -9 before answering"):
        SupervisedSandbox(_KilledWhileStarting(kills=2), RestartPolicy(max_restarts=1), report=reports.append).start()
