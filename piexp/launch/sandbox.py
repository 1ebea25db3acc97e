"""The sandbox a run uses: piexp's embedded server, or an existing loopback one."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator

import httpx

from piexp.config.schema import SandboxSettings
from piexp.errors import UserError
from piexp.sandbox.url import ensure_loopback_url


def _ping_url(run_code_url: str) -> str:
    base = run_code_url.rsplit("/run_code", 1)[0] if run_code_url.endswith("/run_code") else run_code_url
    return base.rstrip("/") + "/v1/ping"


def wait_for_remote(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while time.monotonic() < deadline:
        try:
            if httpx.get(_ping_url(url), timeout=2.0).status_code == 200:
                return
            last_error = "ping did not answer 200"
        except httpx.HTTPError as error:
            last_error = str(error) or type(error).__name__
        time.sleep(0.2)
    raise UserError(
        f"The sandbox at {url} did not answer {_ping_url(url)} within {timeout_s:g} s ({last_error}). "
        "Start it first, or use sandbox=embedded."
    )


def refuse_unreachable_remote(url: str) -> None:
    """Fail at once when nothing listens at a remote sandbox's address (connection
    refused), before any folder is made; a server that is still starting (it accepts but
    does not answer yet) is waited for later, in `wait_for_remote`."""
    try:
        httpx.get(_ping_url(url), timeout=2.0)
    except httpx.ConnectError as error:
        raise UserError(
            f"The sandbox at {url} refuses connections ({error or 'connection refused'}): nothing listens "
            f"there. Start it first (python -m piexp.sandbox serve --port N), fix sandbox.url, or use sandbox=embedded."
        ) from None
    except httpx.HTTPError:
        pass  # it accepted: slow answers are waited for, bounded, inside the run


@contextlib.contextmanager
def run_sandbox(settings: SandboxSettings) -> Iterator[str]:
    """Yield the /run_code URL for the run; an embedded server is stopped on exit."""
    if settings.kind == "remote":
        assert settings.url is not None
        url = ensure_loopback_url(settings.url)
        wait_for_remote(url, settings.start_timeout_s)
        yield url
        return
    from piexp.sandbox.embedded import EmbeddedSandbox
    from piexp.sandbox.settings import SandboxSettings as ServerSettings

    server = ServerSettings(
        default_memory_limit_mb=settings.memory_limit_mb,
        output_cap_bytes=settings.output_cap_bytes,
        allow_unisolated=settings.allow_unisolated,
        launcher=settings.launcher,
    )
    if settings.max_concurrency is not None:  # None: the server's default (cores x 2)
        server = dataclasses.replace(server, max_concurrency=settings.max_concurrency)
    with EmbeddedSandbox(server, startup_timeout_s=settings.start_timeout_s) as sandbox:
        yield sandbox.url
