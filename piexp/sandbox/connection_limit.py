"""A bound on the server's open connections: `ConnectionLimit` wraps aiohttp's protocol
factory and counts connections from accept to close; one beyond `max_connections` is
answered `503 Service Unavailable` with `Retry-After` at once and closed, without being
parsed, so that idle or stalled clients cannot hold an unbounded number of sockets,
buffers and handler tasks. aiohttp itself has no such limit."""

from __future__ import annotations

import asyncio
from typing import Callable, Optional

RETRY_AFTER_S = 1  # clients (piexp's included) retry a 503 with their own back-off

_REFUSAL = (
    "HTTP/1.1 503 Service Unavailable\r\n"
    f"Retry-After: {RETRY_AFTER_S}\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Connection: close\r\n"
    "Content-Length: {length}\r\n"
    "\r\n"
    "{body}"
)


class _Refused(asyncio.Protocol):
    """A connection over the limit: one 503, then closed (after the write is flushed)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        body = f"the sandbox server is at its limit of {self.limit} connections (max_connections)\n"
        assert isinstance(transport, asyncio.WriteTransport)  # a TCP connection's
        transport.write(_REFUSAL.format(length=len(body), body=body).encode())
        transport.close()


class _Counted(asyncio.Protocol):
    """Passes every event to aiohttp's handler and gives the connection's place back
    when it is lost."""

    def __init__(self, inner: asyncio.Protocol, on_lost: Callable[[], None]) -> None:
        self.inner = inner
        self._on_lost: Optional[Callable[[], None]] = on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self._on_lost is not None:
            self._on_lost()
            self._on_lost = None
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> Optional[bool]:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class ConnectionLimit:
    """A protocol factory for `loop.create_server`: `factory()`'s protocol for each of the
    first `max_connections` open connections, a 503-and-close for any beyond."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], max_connections: int) -> None:
        self.factory = factory
        self.max_connections = max(1, max_connections)
        self.open = 0

    def _lost(self) -> None:
        self.open -= 1

    def __call__(self) -> asyncio.Protocol:
        if self.open >= self.max_connections:
            return _Refused(self.max_connections)
        self.open += 1
        return _Counted(self.factory(), self._lost)
