"""A real headless Chromium driven over its DevTools protocol (a websocket, spoken with
aiohttp, which piexp already depends on): open a page, collect every console error and
uncaught exception, run script in the page, take a screenshot.

Chromium runs as root here (as in CI), so without its own sandbox, and with the network
features off that would otherwise flood a closed network.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--window-size=1400,1000",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.errors: list[str] = []
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._events: dict[str, asyncio.Event] = {}
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in self.socket:
            data = json.loads(message.data)
            if "id" in data and data["id"] in self._waiting:
                future = self._waiting.pop(data["id"])
                if "error" in data:
                    future.set_exception(RuntimeError(str(data["error"])))
                else:
                    future.set_result(data.get("result"))
                continue
            method, params = data.get("method"), data.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                self.errors.append(
                    f"exception: {details.get('exception', {}).get('description') or details.get('text')}"
                )
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                self.errors.append(
                    "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
                )
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                self.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
            if method in self._events:
                self._events[method].set()

    async def send(self, method: str, **params: Any) -> Any:
        self._next += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        await self.socket.send_str(json.dumps({"id": self._next, "method": method, "params": params}))
        return await asyncio.wait_for(future, 30)

    async def open(self, url: str) -> None:
        loaded = self._events.setdefault("Page.loadEventFired", asyncio.Event())
        loaded.clear()
        await self.send("Page.navigate", url=url)
        await asyncio.wait_for(loaded.wait(), 30)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if result.get("exceptionDetails"):
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def screenshot(self, path: Path) -> None:
        data = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))


class Chromium:
    """`async with Chromium() as page:` a page of a fresh headless browser."""

    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="piexp-chromium-"))
        self.process: subprocess.Popen[bytes] | None = None

    async def __aenter__(self) -> Page:
        binary = chromium_path()
        assert binary, "chromium is not installed"
        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert self.process.poll() is None, f"chromium exited with {self.process.returncode}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port within 60 s"
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        target = next(t for t in targets if t.get("type") == "page")
        socket = await self.session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        page = Page(socket)
        for domain in ("Page", "Runtime", "Log"):
            await page.send(f"{domain}.enable")
        self.page = page
        return page

    async def __aexit__(self, *_exc: object) -> None:
        try:
            self.page._reader.cancel()
            await self.session.close()
        finally:
            if self.process is not None:
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)
