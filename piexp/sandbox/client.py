"""The pooled async client of a SandboxFusion-compatible `/run_code` service.

One `httpx.AsyncClient` per URL (and per event loop: an httpx client is bound to the loop
it was first used on) so connections are reused across the many tool calls of a run.
Retries with exponential back-off happen only on transport failures (connection refused,
reset, time-out, 5xx from a proxy); an answer from the sandbox, `SandboxError` included,
is final: re-running a program the sandbox refused would only waste time. A URL marked
down (`piexp.sandbox.availability`) is not tried again. Longer outages are the caller's:
an episode whose run failed waits for its sandbox (`availability.wait_for_sandbox`) and
is played again, never scored.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from typing import Any, Optional

import httpx

from piexp.languages import LANGUAGES
from piexp.sandbox.availability import down_reason

log = logging.getLogger(__name__)


class SandboxClient:
    """Talks to one `/run_code` URL. Use `sandbox_client(url)` to get the shared one."""

    def __init__(
        self,
        url: str,
        *,
        max_concurrency: int = 32,
        request_timeout_slack_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 3,
        backoff_s: float = 0.25,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ):
        self.url = url
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.request_timeout_slack_s = request_timeout_slack_s
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=connect_timeout_s, read=None, write=30.0, pool=None),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
            transport=transport,
            trust_env=False,  # never route loopback traffic through an HTTP(S)_PROXY
        )

    async def run(
        self,
        code: str,
        files: Optional[dict[str, str]] = None,
        timeout: float = 10,
        language: str = "python",
        stdin: Optional[str] = None,
        memory_limit_mb: Optional[int] = None,
        fetch_files: Optional[list[str]] = None,
    ) -> tuple[bool, dict[str, Any]]:
        """Run `code` with `files` (name -> UTF-8 text) in `language` (a piexp language
        name, or a SandboxFusion protocol id such as `nodejs`). Returns `(transport_success,
        response)`: True whenever the sandbox answered (even `Failed`/`SandboxError`);
        on final transport failure `(False, {"status": "SandboxError", "message": ...})`."""
        payload: dict[str, Any] = {
            "code": code,
            "language": LANGUAGES[language].sandbox_id if language in LANGUAGES else language,
            "run_timeout": timeout,
            "files": {k: base64.b64encode(v.encode("utf-8")).decode("ascii") for k, v in (files or {}).items()},
        }
        if stdin is not None:
            payload["stdin"] = stdin
        if memory_limit_mb is not None:
            payload["memory_limit_MB"] = int(memory_limit_mb)
        if fetch_files:
            payload["fetch_files"] = list(fetch_files)
        # The server may queue us behind other runs, so the read time-out is generous.
        read_timeout = float(timeout) + self.request_timeout_slack_s
        last_error = "no attempt made"
        async with self._semaphore:
            for attempt in range(self.max_retries + 1):
                if (reason := down_reason(self.url)) is not None:
                    return False, {"status": "SandboxError", "message": f"the sandbox at {self.url} {reason}"}
                if attempt:
                    delay = self.backoff_s * (2 ** (attempt - 1)) * (1 + random.random() * 0.25)
                    await asyncio.sleep(delay)
                try:
                    resp = await self._http.post(
                        self.url,
                        json=payload,
                        timeout=httpx.Timeout(connect=5.0, read=read_timeout, write=30.0, pool=None),
                    )
                except httpx.TransportError as exc:
                    last_error = f"{type(exc).__name__}: {exc}"
                    log.warning("sandbox %s transport error (attempt %d): %s", self.url, attempt + 1, last_error)
                    continue
                if resp.status_code in (502, 503, 504):
                    last_error = f"HTTP {resp.status_code}"
                    continue
                if resp.status_code != 200:
                    # A definite answer (422 unknown language, 413, ...): not retried.
                    return True, {
                        "status": "SandboxError",
                        "message": f"HTTP {resp.status_code}: {resp.text[:2000]}",
                    }
                try:
                    data = resp.json()
                except ValueError:
                    return True, {"status": "SandboxError", "message": "the sandbox answered invalid JSON"}
                return True, data
        return False, {
            "status": "SandboxError",
            "message": f"sandbox at {self.url} unreachable after {self.max_retries + 1} attempts: {last_error}",
        }

    async def close(self) -> None:
        await self._http.aclose()


_clients: dict[tuple[str, int], SandboxClient] = {}


def sandbox_client(url: str, **kwargs: Any) -> SandboxClient:
    """The shared client for `url` in the running event loop (created on first use).
    The URL is not checked here; callers pass it through `ensure_loopback_url` first."""
    try:
        loop_id = id(asyncio.get_running_loop())
    except RuntimeError:
        loop_id = 0
    key = (url, loop_id)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = SandboxClient(url, **kwargs)
    return client


async def close_sandbox_clients() -> None:
    """Close every pooled client (those of the current loop gracefully)."""
    clients = list(_clients.values())
    _clients.clear()
    for c in clients:
        try:
            await c.close()
        except Exception:  # noqa: BLE001 - a client bound to a closed loop
            pass
