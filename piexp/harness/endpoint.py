"""The model endpoint a CLI harness talks to: OpenAI-compatible chat completions
(`POST /v1/chat/completions`, streamed as server-sent events the way OpenAI's API streams
them), one unix socket per episode.

The socket is the episode's capability: it is bound into that episode's sandbox only, so
the endpoint needs no secret (the API key in the harness's config is a placeholder) and
knows which episode a request belongs to by the socket it came in on. Each request is
answered by the episode's `Responder` (a scripted policy, or the run's model) and recorded
as a `ModelCall`: what the harness sent and what it got back.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from aiohttp import web

# A chat request's JSON body -> the assistant message to answer (OpenAI's shape: content
# and optional tool_calls with JSON-string arguments).
Responder = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

_MAX_REQUEST_BYTES = 64 << 20  # a whole re-sent history; far above any episode's


@runtime_checkable
class PlaysThroughEndpoint(Protocol):
    """A harness whose episodes ask an endpoint `Responder` for every model turn (Pi's):
    `play_responder` plays one episode with its requests answered by `responder` and
    returns its record (`piexp.policies.rollout.EpisodeRecord`)."""

    async def play_responder(
        self,
        responder: Responder,
        policy_name: str,
        task: Any,
        language: str,
        settings: Any,
        *,
        sample: int = 0,
        record_transcript: bool = True,
    ) -> Any: ...


class LimitReached(Exception):
    """Raised by a responder: the episode reached a limit (its name is the argument, the
    episode's stop reason); the request is answered with an empty final message, so the
    harness stops."""


_END: dict[str, Any] = {"content": ""}  # the answer that ends a harness's run


@dataclass
class ModelCall:
    """One chat request of an episode and its answer."""

    request: dict[str, Any]
    response: dict[str, Any] | None = None
    error: str | None = None  # the responder failed (answered with an empty final message)
    limit: str | None = None  # refused (so answered): the episode reached this limit
    wall_s: float = 0.0


@dataclass
class EpisodeEndpoint:
    """The endpoint of one episode, listening on `socket_path` until `close()`."""

    socket_path: str
    responder: Responder
    model: str = "piexp"
    calls: list[ModelCall] = field(default_factory=list)
    fatal: BaseException | None = None  # a responder's failure that is not an Exception
    _runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=_MAX_REQUEST_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        # The episode is over when the endpoint closes: a request still being answered
        # (its harness gone) is cancelled at once, not waited for.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.UnixSite(self._runner, self.socket_path)
        await site.start()
        # The sandbox's user (not this process's) connects: a unix socket needs write
        # permission to connect to; its directory is bound read-only into the sandbox.
        os.chmod(self.socket_path, 0o666)

    async def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return web.json_response({"error": {"message": "the request body is not JSON"}}, status=400)
        call = ModelCall(request=body)
        self.calls.append(call)
        try:
            message = await self.responder(body)
        except LimitReached as reached:
            call.limit = str(reached)
            message = _END
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # noqa: BLE001 - recorded, and reported by the episode
            call.error = f"{type(error).__name__}: {error}"
            if not isinstance(error, Exception):
                # A failure that must stop the run (the model service gone for good,
                # piexp.policies.model.ModelServiceFailure): the episode raises it.
                self.fatal = error
            message = _END
        else:
            call.response = message
        call.wall_s = time.perf_counter() - started
        # A refused or failed request still gets an answer, an empty final message, so the
        # harness ends its run at once: an HTTP error would make it retry with back-off.
        if body.get("stream"):
            return await self._stream(request, message)
        return web.json_response(self._completion(message))

    def _completion(self, message: dict[str, Any]) -> dict[str, Any]:
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": _usage(message),
        }

    async def _stream(self, request: web.Request, message: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        chunk_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"

        async def send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else [],
                **extra,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        if message.get("content"):
            await send({"content": message["content"]})
        for index, tool_call in enumerate(message.get("tool_calls") or []):
            await send(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": tool_call["id"],
                            "type": "function",
                            "function": dict(tool_call["function"]),
                        }
                    ]
                }
            )
        await send({}, "tool_calls" if message.get("tool_calls") else "stop")
        chunk = {"id": chunk_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": self.model}
        await response.write(f"data: {json.dumps({**chunk, 'choices': [], 'usage': _usage(message)})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _usage(message: dict[str, Any]) -> dict[str, int]:
    # Token counts are the responder's to know (a scripted one has none); Pi only shows them.
    return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
