"""Real runs of Python and JavaScript through the embedded server."""

from __future__ import annotations

import asyncio
import base64
import shutil

import pytest

from piexp.sandbox import close_sandbox_clients, sandbox_client


def test_ping(sandbox):
    assert sandbox.ping()


def test_python_with_files_stdin_fetch(sandbox):
    code = (
        "import sys\n"
        "data = open('data/in.txt').read()\n"
        "n = int(sys.stdin.read())\n"
        "open('out/result.txt', 'w').write(str(n * 2)) if __import__('os').makedirs('out', exist_ok=True) is None else None\n"
        "print(data.strip(), n)\n"
    )
    resp = sandbox.run(
        code, files={"data/in.txt": "héllo\n"}, stdin="21", fetch_files=["out/result.txt", "missing.txt"]
    )
    assert resp["status"] == "Success", resp
    assert resp["compile_result"] is None
    rr = resp["run_result"]
    assert rr["status"] == "Finished" and rr["return_code"] == 0
    assert rr["stdout"] == "héllo 21\n"
    assert isinstance(rr["execution_time"], float)
    assert resp["files"] == {"out/result.txt": base64.b64encode(b"42").decode()}
    sandbox.assert_clean()


def test_javascript_with_files_stdin_fetch(sandbox):
    code = (
        "const fs = require('fs');\n"
        "const n = parseInt(fs.readFileSync(0, 'utf8'));\n"
        "const words = fs.readFileSync('words.txt', 'utf8').trim().split(/\\s+/);\n"
        "fs.writeFileSync('count.txt', String(words.length + n));\n"
        "console.log(words.join(','));\n"
    )
    resp = sandbox.run(code, "nodejs", files={"words.txt": "a b c"}, stdin="10", fetch_files=["count.txt"])
    assert resp["status"] == "Success", resp
    assert resp["run_result"]["stdout"] == "a,b,c\n"
    assert base64.b64decode(resp["files"]["count.txt"]) == b"13"
    sandbox.assert_clean()


def test_failed_on_nonzero_exit(sandbox):
    resp = sandbox.run("import sys; print('x'); sys.exit(3)")
    assert resp["status"] == "Failed"
    assert resp["run_result"]["status"] == "Finished"
    assert resp["run_result"]["return_code"] == 3
    resp = sandbox.run("throw new Error('boom')", "nodejs")
    assert resp["status"] == "Failed" and "boom" in resp["run_result"]["stderr"]


def test_unknown_language_is_422(sandbox):
    r = sandbox.post("print(1)", "cobol")
    assert r.status_code == 422
    r = sandbox.post("console.log(1)", "javascript")  # piexp's name; the protocol says nodejs
    assert r.status_code == 422


def test_missing_julia_answers_like_sandboxfusion(sandbox):
    if shutil.which("julia") is not None:
        pytest.skip("julia is on PATH here")
    resp = sandbox.run('println("hi")', "julia")
    assert resp["status"] == "Failed"
    rr = resp["run_result"]
    assert rr["status"] == "Finished" and rr["return_code"] == 127
    assert "julia: command not found" in rr["stderr"]


@pytest.mark.skipif(shutil.which("julia") is None, reason="julia is not on PATH")
def test_julia_runs(sandbox):
    resp = sandbox.run("println(parse(Int, readline()) + 1)", "julia", stdin="41\n")
    assert resp["status"] == "Success", resp
    assert resp["run_result"]["stdout"] == "42\n"


def test_pooled_client_against_server(sandbox):
    async def main():
        client = sandbox_client(sandbox.url)
        assert sandbox_client(sandbox.url) is client
        results = await asyncio.gather(
            *[
                client.run(
                    code=f"print(open('n.txt').read().strip(), {i})",
                    files={"n.txt": "v"},
                    timeout=10,
                    language="python",
                )
                for i in range(6)
            ],
            client.run(
                code="console.log(require('fs').readFileSync('n.txt','utf8'))",
                files={"n.txt": "js"},
                timeout=10,
                language="javascript",
                fetch_files=["n.txt"],
                memory_limit_mb=256,
            ),
        )
        await close_sandbox_clients()
        return results

    results = asyncio.run(main())
    for i, (ok, resp) in enumerate(results[:6]):
        assert ok and resp["run_result"]["stdout"] == f"v {i}\n"
    ok, resp = results[6]
    assert ok and resp["run_result"]["stdout"] == "js\n" and resp["files"]["n.txt"] == base64.b64encode(b"js").decode()
    sandbox.assert_clean()


def test_tinker_cookbook_client_unchanged(sandbox):
    from tinker_cookbook.sandbox import SandboxFusionClient

    async def main():
        client = SandboxFusionClient(url=sandbox.url, max_concurrency=2)
        try:
            ok, resp = await client.run(
                code="print(open('a.txt').read())", files={"a.txt": "from cookbook"}, timeout=10
            )
            bad_ok, bad = await client.run(code="import sys; sys.exit(1)", files={}, timeout=10)
            js_ok, js = await client.run(code="console.log(6*7)", files={}, timeout=10, language="nodejs")
        finally:
            await client.close()
        return ok, resp, bad_ok, bad, js_ok, js

    ok, resp, bad_ok, bad, js_ok, js = asyncio.run(main())
    assert ok and resp["run_result"]["stdout"] == "from cookbook\n"
    assert not bad_ok and bad["status"] == "Failed"
    assert js_ok and js["run_result"]["stdout"] == "42\n"


def test_concurrent_burst_queues(sandbox):
    """More requests than max_concurrency (4): all are answered."""

    async def main():
        client = sandbox_client(sandbox.url)
        res = await asyncio.gather(
            *[client.run(code="import time; time.sleep(0.2); print('ok')", timeout=10) for _ in range(10)]
        )
        await close_sandbox_clients()
        return res

    assert all(ok and r["run_result"]["stdout"] == "ok\n" for ok, r in asyncio.run(main()))
    sandbox.assert_clean()
