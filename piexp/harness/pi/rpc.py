"""Pi's RPC mode (`pi --mode rpc`, Pi's docs/rpc.md): JSON records, one per LF-ended
line, commands on Pi's stdin, responses and session events on its stdout.

A warm slot (piexp.harness.pi.slot) keeps one such Pi for many episodes: each episode is
`new_session` then `prompt`, over at Pi's `agent_settled` event. The events between are
the ones `pi --print --mode json` prints for the same run (Pi's docs/json.md), so the
episode's trace is read by the same parser (piexp.harness.pi.trace).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from piexp.harness.pi.install import PiInstall
from piexp.harness.pi.sandbox import pi_command


def rpc_argv(install: PiInstall, model: str, heap_mb: int) -> list[str]:
    """Pi's command line in a warm slot: RPC mode with every option of the one-process
    episode (`pi_argv`) but the prompt, and node's heap capped at `heap_mb` (without a
    cap a long-lived Pi's heap grows by about 0.13 MB an episode before V8 collects it)."""
    return pi_command(
        install,
        model,
        ("--mode", "rpc", "--no-session", "--offline"),
        node_options=(f"--max-old-space-size={heap_mb}",),
    )


class RpcStream:
    """Pi's stdout split into records: strictly on LF (never on U+2028, which is valid
    inside a JSON string), with no line-length limit (`agent_end` carries a whole
    conversation)."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._lines: list[bytes] = []
        self.closed = False

    async def next_line(self) -> bytes | None:
        """The next record's raw line (without its LF), None at end of stream."""
        while not self._lines:
            if self.closed:
                return None
            chunk = await self._stream.read(1 << 16)
            if not chunk:
                self.closed = True
                if self._buffer:
                    self._lines.append(bytes(self._buffer))
                    self._buffer.clear()
                continue
            self._buffer.extend(chunk)
            *lines, rest = self._buffer.split(b"\n")
            self._lines.extend(bytes(line).rstrip(b"\r") for line in lines)
            self._buffer = bytearray(rest)
        return self._lines.pop(0)


def record_of(line: bytes) -> dict[str, Any] | None:
    """A line's JSON object (None for anything else: Pi's stdout carries only records)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def command(kind: str, command_id: str, **fields: Any) -> bytes:
    return (json.dumps({"id": command_id, "type": kind, **fields}) + "\n").encode()
