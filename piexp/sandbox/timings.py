"""Where the time of one request goes: perf_counter spans the runner and launchers mark
step by step, sent back in a `Server-Timing` header (bench/sandbox.py reads them)."""

from __future__ import annotations

import time


class Timings:
    """perf_counter spans (ms) of one request, in the order they were marked; each span
    runs from the previous mark. Sent back as a `Server-Timing` header by the server."""

    __slots__ = ("spans", "_last")

    def __init__(self) -> None:
        self.spans: dict[str, float] = {}
        self._last = time.perf_counter()

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.spans[name] = self.spans.get(name, 0.0) + (now - self._last) * 1e3
        self._last = now

    def header(self) -> str:
        return ", ".join(f"{k};dur={v:.3f}" for k, v in self.spans.items())
