"""The pooled client's retry policy, with a fake transport (no server needed)."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx

from piexp.sandbox import close_sandbox_clients, sandbox_client
from piexp.sandbox.client import SandboxClient
from piexp.sandbox.embedded import free_port

OK = {
    "status": "Success",
    "message": "",
    "compile_result": None,
    "run_result": {"status": "Finished", "execution_time": 0.1, "return_code": 0, "stdout": "1\n", "stderr": ""},
    "files": {},
}


def make_client(handler) -> tuple[SandboxClient, list]:
    calls: list[dict] = []

    def wrapped(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content))
        return handler(len(calls))

    client = SandboxClient("http://127.0.0.1:1/run_code", transport=httpx.MockTransport(wrapped), backoff_s=0.001)
    return client, calls


def test_retries_transport_errors_then_succeeds():
    def handler(n):
        if n < 3:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json=OK)

    client, calls = make_client(handler)

    async def main():
        try:
            return await client.run(code="print(1)", files={"a.txt": "é"}, timeout=5, language="javascript", stdin="x")
        finally:
            await client.close()

    ok, resp = asyncio.run(main())
    assert ok and resp == OK
    assert len(calls) == 3
    # payload: files base64'd from UTF-8, piexp's `javascript` sent as `nodejs`
    assert calls[0]["files"] == {"a.txt": base64.b64encode("é".encode()).decode()}
    assert calls[0]["language"] == "nodejs" and calls[0]["stdin"] == "x" and calls[0]["run_timeout"] == 5


def test_never_retries_a_sandbox_error_answer():
    answer = {"status": "SandboxError", "message": "refused: file name '../x' contains '..'", "run_result": None}
    client, calls = make_client(lambda n: httpx.Response(200, json=answer))

    async def main():
        try:
            return await client.run(code="print(1)", files={}, timeout=5)
        finally:
            await client.close()

    ok, resp = asyncio.run(main())
    assert ok is True and resp == answer
    assert len(calls) == 1


def test_never_retries_a_422():
    client, calls = make_client(lambda n: httpx.Response(422, json={"detail": []}))

    async def main():
        try:
            return await client.run(code="1", files={}, timeout=5, language="cobol")
        finally:
            await client.close()

    ok, resp = asyncio.run(main())
    assert len(calls) == 1 and resp["status"] == "SandboxError" and "422" in resp["message"]


def test_final_transport_failure_shape():
    def handler(n):
        raise httpx.ReadTimeout("timed out")

    client, calls = make_client(handler)

    async def main():
        try:
            return await client.run(code="1", files={}, timeout=5)
        finally:
            await client.close()

    ok, resp = asyncio.run(main())
    assert ok is False
    assert resp["status"] == "SandboxError" and "run_result" not in resp
    assert "unreachable" in resp["message"]
    assert len(calls) == client.max_retries + 1


def test_real_connection_refused_and_pool_close():
    url = f"http://127.0.0.1:{free_port()}/run_code"

    async def main():
        client = sandbox_client(url, backoff_s=0.001, max_retries=1)
        assert sandbox_client(url) is client
        res = await client.run(code="1", files={}, timeout=1)
        await close_sandbox_clients()
        assert sandbox_client(url) is not client  # a fresh one after close
        await close_sandbox_clients()
        return res

    ok, resp = asyncio.run(main())
    assert ok is False and resp["status"] == "SandboxError" and "run_result" not in resp
