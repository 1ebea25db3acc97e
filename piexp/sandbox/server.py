"""The aiohttp application serving SandboxFusion's `/run_code` and `/v1/ping`."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import warnings
from typing import Optional

from aiohttp import web
from pydantic import ValidationError

from .protocol import LANGUAGES, RunCodeRequest, sandbox_error
from .runner import Runner, Timings
from .settings import SandboxSettings

log = logging.getLogger(__name__)

RUNNER_KEY = web.AppKey("runner", Runner)
SEMAPHORE_KEY = web.AppKey("semaphore", asyncio.Semaphore)


def _unprocessable(detail: list[dict]) -> web.Response:
    # FastAPI's 422 body shape, which is what SandboxFusion answers.
    return web.json_response({"detail": detail}, status=422)


async def ping(_request: web.Request) -> web.Response:
    return web.Response(text="pong")


async def run_code(request: web.Request) -> web.Response:
    timings = Timings()
    try:
        body = await request.json()
    except ValueError:
        return _unprocessable([{"loc": ["body"], "msg": "body is not valid JSON", "type": "json_invalid"}])
    try:
        req = RunCodeRequest.model_validate(body)
    except ValidationError as exc:
        return _unprocessable(exc.errors(include_url=False, include_context=False, include_input=False))
    if req.language not in LANGUAGES:
        return _unprocessable([{
            "loc": ["body", "language"],
            "msg": f"unknown language {req.language!r}; expected one of {sorted(LANGUAGES)}",
            "type": "enum",
        }])
    timings.mark("parse")
    runner = request.app[RUNNER_KEY]
    # The semaphore bounds concurrent runs; further requests queue here (aiohttp keeps
    # accepting connections), which is what a client sending a burst expects.
    async with request.app[SEMAPHORE_KEY]:
        timings.mark("queue")
        try:
            resp = await runner.run(req, timings)
        except Exception as exc:  # noqa: BLE001 - report, never crash the server
            log.exception("run failed inside the sandbox server")
            resp = sandbox_error(f"internal sandbox error: {type(exc).__name__}: {exc}")
    body = resp.model_dump_json().encode()
    timings.mark("respond")
    # Per-step spans of this request (parse, queue, files, cgroup, spawn, confine, run,
    # drain, fetch, cleanup, respond), for bench/sandbox.py and anyone profiling.
    return web.Response(body=body, content_type="application/json", headers={"Server-Timing": timings.header()})


def create_app(settings: Optional[SandboxSettings] = None, runner: Optional[Runner] = None) -> web.Application:
    """Build the app. Raises RuntimeError when bwrap is missing and unisolated runs are
    not allowed, so the server refuses to start rather than run code unprotected."""
    settings = settings or SandboxSettings()
    runner = runner or Runner.create(settings)
    app = web.Application(client_max_size=256 << 20)
    app[RUNNER_KEY] = runner
    app[SEMAPHORE_KEY] = asyncio.Semaphore(max(1, settings.max_concurrency))
    app.router.add_post("/run_code", run_code)
    app.router.add_get("/v1/ping", ping)

    async def _cleanup(_app: web.Application) -> None:
        await runner.aclose()

    app.on_cleanup.append(_cleanup)
    return app


def _use_pidfd_child_watcher() -> None:
    """Python 3.11's default ThreadedChildWatcher starts a thread per subprocess that
    blocks in waitpid() and then wakes the loop: a thread start and an extra hand-off per
    run. A pidfd (Linux >= 5.3) wakes the loop directly. 3.12+ picks it by itself."""
    if sys.version_info >= (3, 12) or not hasattr(asyncio, "PidfdChildWatcher"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(asyncio.PidfdChildWatcher())


def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    settings: Optional[SandboxSettings] = None,
    *,
    listen_fd: Optional[int] = None,
) -> None:
    """Run the server until SIGTERM/SIGINT. `listen_fd`: serve on an already bound,
    listening socket handed over by the parent (no port race between jobs)."""
    _use_pidfd_child_watcher()
    if listen_fd is not None:
        import socket

        sock = socket.socket(fileno=listen_fd)
        web.run_app(create_app(settings), sock=sock, print=None, access_log=None, handle_signals=True)
        return
    web.run_app(create_app(settings), host=host, port=port, print=None, access_log=None, handle_signals=True)
