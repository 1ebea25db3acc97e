"""Whether a run's sandbox can still run programs: the one place that decides when an
infrastructure failure is worth a retry and when the run must stop. A supervisor that
gives up on its embedded server marks its URL down (`mark_down`); `wait_for_sandbox`,
called after a program failed to run for the sandbox's reasons, raises `SandboxDown` at
once for a URL marked down, waits with back-off for one that does not answer (a
restarting embedded server, a remote one that went away) and marks it down when it stays
silent past the run's limit; `refuse_down_sandbox`, before each training batch, only
looks at the marks."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

_lock = threading.Lock()
_down: dict[str, str] = {}  # /run_code URL -> why it will not answer again in this run
_restarts: dict[str, int] = {}  # /run_code URL -> restarts of its server in this process


class SandboxDown(BaseException):
    """The run's sandbox is gone for good: the run stops, resumable, and nothing more is
    scored. A BaseException, not an Exception, on purpose: tinker-cookbook's rollout
    strategies catch `Exception` to retry or drop one group, and this is not one group's
    failure but the end of every later one (the run must not go on sampling)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"the sandbox at {url} {reason}")
        self.url = url
        self.reason = reason


def mark_down(url: str, reason: str) -> None:
    """From now on `url` is down in this process (`reason` completes "the sandbox at URL ...")."""
    with _lock:
        _down.setdefault(url, reason)


def mark_up(url: str) -> None:
    """Forget that `url` was down (a new server took the URL: tests, a later run)."""
    with _lock:
        _down.pop(url, None)


def note_restart(url: str) -> None:
    with _lock:
        _restarts[url] = _restarts.get(url, 0) + 1


def restarts(url: str) -> int:
    """How many times the server at `url` was restarted in this process (training logs it
    per step as `sandbox_restarts`)."""
    with _lock:
        return _restarts.get(url, 0)


def down_reason(url: str) -> str | None:
    with _lock:
        return _down.get(url)


def ping_url(run_code_url: str) -> str:
    """The `/v1/ping` URL of the server whose `/run_code` URL this is."""
    base = run_code_url.rsplit("/run_code", 1)[0] if run_code_url.endswith("/run_code") else run_code_url
    return base.rstrip("/") + "/v1/ping"


def answers_ping(url: str, timeout_s: float) -> bool:
    try:
        return httpx.get(ping_url(url), timeout=timeout_s, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def check_sandbox(url: str, within_s: float) -> None:
    """Return once the sandbox at `url` answers its ping; raise `SandboxDown` if it is
    marked down, or after `within_s` seconds of silence (then it is marked down too)."""
    deadline = time.monotonic() + within_s
    delay = 0.1
    while True:
        refuse_down_sandbox(url)
        remaining = deadline - time.monotonic()
        if answers_ping(url, timeout_s=max(0.5, min(5.0, remaining))):
            return
        if time.monotonic() >= deadline:
            mark_down(url, f"did not answer its health check for {within_s:g} s")
            continue  # raises above
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 2.0)


def refuse_down_sandbox(url: str) -> None:
    """Raise `SandboxDown` if `url` is marked down (no network: the supervisor of an
    embedded server watches it all along, and an episode whose run failed waits for a
    remote one)."""
    reason = down_reason(url)
    if reason is not None:
        raise SandboxDown(url, reason)


async def wait_for_sandbox(url: str, within_s: float) -> None:
    """`check_sandbox` off the event loop (its pings and sleeps would stall the episodes
    still running)."""
    refuse_down_sandbox(url)
    await asyncio.to_thread(check_sandbox, url, within_s)
