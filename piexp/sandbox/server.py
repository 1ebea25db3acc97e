"""The aiohttp application serving SandboxFusion's `/run_code` and `/v1/ping`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
import warnings
from collections.abc import Sequence
from typing import Any, Optional

from aiohttp import web
from pydantic import ValidationError

from .connection_limit import RETRY_AFTER_S, ConnectionLimit
from .protocol import PROTOCOL_LANGUAGES, RunCodeRequest, RunCodeResponse, sandbox_error
from .request_limits import QueuedBytes, Reservation, refusal
from .runner import Runner, Timings
from .settings import SandboxSettings

log = logging.getLogger(__name__)

RUNNER_KEY = web.AppKey("runner", Runner)
SEMAPHORE_KEY = web.AppKey("semaphore", asyncio.Semaphore)
SETTINGS_KEY = web.AppKey("settings", SandboxSettings)
QUEUED_KEY = web.AppKey("queued_bytes", QueuedBytes)


def _unprocessable(detail: Sequence[Any]) -> web.Response:
    # FastAPI's 422 body shape, which is what SandboxFusion answers.
    return web.json_response({"detail": detail}, status=422)


async def ping(_request: web.Request) -> web.Response:
    return web.Response(text="pong")


def _too_large(settings: SandboxSettings) -> web.Response:
    return web.json_response(
        {"detail": f"request body above the server's cap of {settings.max_request_body_mb} MB (max_request_body_mb)"},
        status=413,
    )


async def _read_timed_out(request: web.Request, settings: SandboxSettings) -> web.Response:
    """A 408 for a body that did not arrive in time, and the connection closed at once
    (aiohttp would otherwise wait up to 10 s more for the rest of the body)."""
    resp = web.json_response(
        {"detail": f"request body not received within {settings.request_read_timeout_s:g} s (request_read_timeout_s)"},
        status=408,
    )
    resp.force_close()
    await resp.prepare(request)
    await resp.write_eof()
    request.protocol.force_close()
    return resp


async def run_code(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS_KEY]
    body_cap = settings.max_request_body_mb << 20
    declared = request.content_length
    if declared is not None and declared > body_cap:
        return _too_large(settings)
    # The body counts against max_queued_request_mb from its first byte until the request
    # gets a slot; a chunked one (no Content-Length) counts as the whole body cap.
    reservation = request.app[QUEUED_KEY].reserve(declared if declared is not None else body_cap)
    if reservation is None:
        return web.json_response(
            {"detail": f"too many request bytes queued (max_queued_request_mb={settings.max_queued_request_mb})"},
            status=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    try:
        return await _run_code_reserved(request, settings, reservation)
    finally:
        reservation.release()


async def _run_code_reserved(
    request: web.Request, settings: SandboxSettings, reservation: Reservation
) -> web.StreamResponse:
    timings = Timings()
    try:
        async with asyncio.timeout(settings.request_read_timeout_s):
            raw = await request.read()
    except TimeoutError:
        return await _read_timed_out(request, settings)
    except web.HTTPRequestEntityTooLarge:
        return _too_large(settings)
    try:
        body = json.loads(raw)
    except ValueError:
        return _unprocessable([{"loc": ["body"], "msg": "body is not valid JSON", "type": "json_invalid"}])
    del raw
    try:
        req = RunCodeRequest.model_validate(body)
    except ValidationError as exc:
        return _unprocessable(exc.errors(include_url=False, include_context=False, include_input=False))
    del body
    if req.language not in PROTOCOL_LANGUAGES:
        return _unprocessable(
            [
                {
                    "loc": ["body", "language"],
                    "msg": f"unknown language {req.language!r}; expected one of {sorted(PROTOCOL_LANGUAGES)}",
                    "type": "enum",
                }
            ]
        )
    why = refusal(req, settings)
    if why:
        return _json(sandbox_error(f"refused: {why}"), timings)
    timings.mark("parse")
    runner = request.app[RUNNER_KEY]
    # The semaphore bounds concurrent runs; further requests queue here, their bodies
    # bounded by max_queued_request_mb. A client that hangs up cancels this handler
    # (handler_cancellation): queued, it never runs; running, the runner kills its run.
    async with request.app[SEMAPHORE_KEY]:
        reservation.release()  # running requests are bounded by max_concurrency instead
        timings.mark("queue")
        try:
            resp = await runner.run(req, timings)
        except Exception as exc:  # noqa: BLE001 - report, never crash the server
            log.exception("run failed inside the sandbox server")
            resp = sandbox_error(f"internal sandbox error: {type(exc).__name__}: {exc}")
    return _json(resp, timings)


def _json(resp: RunCodeResponse, timings: Timings) -> web.Response:
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
    app = web.Application(client_max_size=settings.max_request_body_mb << 20)
    app[RUNNER_KEY] = runner
    app[SETTINGS_KEY] = settings
    app[QUEUED_KEY] = QueuedBytes(settings.max_queued_request_mb << 20)
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
    settings = settings or SandboxSettings()
    sock = socket.socket(fileno=listen_fd) if listen_fd is not None else None
    asyncio.run(_serve(create_app(settings), settings, host, port, sock))


async def _serve(
    app: web.Application, settings: SandboxSettings, host: str, port: int, sock: Optional[socket.socket]
) -> None:
    """aiohttp's run_app, plus what it lacks: a connection limit (ConnectionLimit) on
    its protocol factory. `handler_cancellation`: a client that hangs up cancels its
    handler, so its run is killed (or, queued, never starts). aiohttp's keep-alive timer
    is also its header time-out: a connection whose next request's headers are not
    complete that long after it opened (or after its last answer) is closed."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        handler_cancellation=True,
        keepalive_timeout=settings.request_read_timeout_s,
    )
    await runner.setup()
    try:
        assert runner.server is not None  # made by setup()
        factory = ConnectionLimit(runner.server, settings.max_connections)
        if sock is not None:
            listener = await loop.create_server(factory, sock=sock)
        else:
            listener = await loop.create_server(factory, host, port, reuse_address=True)
        await stop.wait()
        listener.close()
    finally:
        await runner.cleanup()
