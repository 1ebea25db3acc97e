"""The sandbox a run uses: piexp's embedded server, supervised (restarted when it dies or
hangs, within `sandbox.max_restarts`), or an existing loopback one."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator

import httpx

from piexp.config.schema import SandboxSettings
from piexp.errors import UserError
from piexp.sandbox.availability import mark_up, ping_url
from piexp.sandbox.url import ensure_loopback_url


def wait_for_remote(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while time.monotonic() < deadline:
        try:
            if httpx.get(ping_url(url), timeout=2.0).status_code == 200:
                return
            last_error = "ping did not answer 200"
        except httpx.HTTPError as error:
            last_error = str(error) or type(error).__name__
        time.sleep(0.2)
    raise UserError(
        f"The sandbox at {url} did not answer {ping_url(url)} within {timeout_s:g} s ({last_error}). "
        "Start it first, or use sandbox=embedded."
    )


def refuse_unreachable_remote(url: str) -> None:
    """Fail at once when nothing listens at a remote sandbox's address (connection
    refused), before any folder is made; a server that is still starting (it accepts but
    does not answer yet) is waited for later, in `wait_for_remote`."""
    try:
        httpx.get(ping_url(url), timeout=2.0)
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
        mark_up(url)  # this process may have given it up in an earlier run (a sequential sweep)
        yield url
        return
    from piexp.console import say
    from piexp.sandbox.embedded import EmbeddedSandbox
    from piexp.sandbox.settings import SandboxSettings as ServerSettings
    from piexp.sandbox.supervisor import RestartPolicy, SupervisedSandbox

    server = ServerSettings(
        default_memory_limit_mb=settings.memory_limit_mb,
        output_cap_bytes=settings.output_cap_bytes,
        allow_unisolated=settings.allow_unisolated,
        launcher=settings.launcher,
    )
    if settings.max_concurrency is not None:  # None: the server's default (cores x 2)
        server = dataclasses.replace(server, max_concurrency=settings.max_concurrency)
    policy = RestartPolicy(
        max_restarts=settings.max_restarts,
        window_s=settings.restart_window_s,
        health_timeout_s=settings.health_timeout_s,
    )
    embedded = EmbeddedSandbox(server, startup_timeout_s=settings.start_timeout_s)
    with SupervisedSandbox(embedded, policy, report=say) as sandbox:
        yield sandbox.url
