"""The server against hostile clients, over real sockets: limits a client asks for beyond
the server's caps are refused (before the request takes a slot), a client that hangs up
takes its run down with it, and stalled, oversized, flooding or too many connections
are cut off without holding the server's memory, slots or sockets."""

from __future__ import annotations

import base64
import json
import select
import shutil
import socket
import threading
import time

import httpx
import pytest

from piexp.sandbox import EmbeddedSandbox


def _raw_request(port: int, body: bytes, *, content_length: int | None = None) -> socket.socket:
    """A connection that has sent a POST /run_code with `body` (Content-Length may lie)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    length = len(body) if content_length is None else content_length
    sock.sendall(
        b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {length}\r\n\r\n".encode()
        + body
    )
    return sock


def _payload(code: str, **extra) -> bytes:
    return json.dumps({"code": code, "language": "python", **extra}).encode()


def _sleeper(seconds: int, marker: str) -> str:
    """A program whose process (a shell) carries `marker` on its command line."""
    return f"import subprocess\nsubprocess.run(['sh', '-c', 'sleep {seconds}; : {marker}'])"


def _read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    start = time.monotonic()
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data, time.monotonic() - start


def _refused(resp: httpx.Response, setting: str) -> str:
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["status"] == "SandboxError" and setting in data["message"], data
    assert data["run_result"] is None, data  # nothing ran
    return data["message"]


# --------------------------------------------------------------- caps, both launchers


@pytest.mark.parametrize("memory", [100_000_000, 2**44, 4097, -5])
def test_a_memory_limit_beyond_the_cap_is_refused(sandbox, memory):
    msg = _refused(sandbox.post("print(1)", memory_limit_MB=memory), "max_memory_limit_mb")
    assert str(memory) in msg


def test_the_default_and_capped_memory_limits_still_run(sandbox):
    for memory in (-1, 0, 256, 4096):
        resp = sandbox.run("print(1)", memory_limit_MB=memory)
        assert resp["status"] == "Success", (memory, resp)


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN"])
@pytest.mark.parametrize("field", ["run_timeout", "compile_timeout"])
def test_a_time_out_that_is_not_finite_is_refused(sandbox, field, literal):
    body = _payload("print(1)")[:-1] + f', "{field}": {literal}}}'.encode()
    resp = sandbox.http.post(sandbox.url, content=body, headers={"Content-Type": "application/json"})
    _refused(resp, f"{field}=")


def test_a_time_out_beyond_the_cap_is_clamped_not_refused(sandbox):
    resp = sandbox.run("print(1)", run_timeout=10**9)
    assert resp["status"] == "Success", resp


def test_too_many_files_or_fetched_files_are_refused(sandbox):
    files = {f"f{i}.txt": "x" for i in range(257)}
    _refused(sandbox.post("print(1)", files=files), "max_request_files")
    _refused(sandbox.post("print(1)", fetch_files=[f"f{i}" for i in range(257)]), "max_request_files")
    assert sandbox.run("print(1)", files={f"f{i}.txt": "x" for i in range(256)})["status"] == "Success"


def test_a_deep_or_long_file_name_is_refused_and_leaves_nothing(sandbox):
    """A name of 2,100 components made a tree that cleanup could not remove."""
    _refused(sandbox.post("print(1)", files={"a/" * 2100 + "f": "x"}), "max_file_name_bytes")
    _refused(sandbox.post("print(1)", files={"d/" * 32 + "f": "x"}), "max_file_name_depth")
    _refused(sandbox.post("print(1)", files={"x" * 1025: "x"}), "max_file_name_bytes")
    _refused(sandbox.post("print(1)", fetch_files=["d/" * 32 + "f"]), "max_file_name_depth")
    resp = sandbox.run("print(open('" + "d/" * 31 + "f').read())", files={"d/" * 31 + "f": "ok"})
    assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "ok\n", resp
    sandbox.assert_clean()


def _fill_slots(sandbox, marker: str, pids_with) -> list[socket.socket]:
    """Four clients (the fixture's max_concurrency) whose `sleep` runs have started.

    On a machine busy with other tests, starting four sandboxed programs (and the teardown
    of the previous test's runs, whose slots they take) has taken more than 15 s: the wait
    is 60 s, and each run sleeps well past it, so that the first is still running when the
    last starts. The caller's clients hang up, which kills the runs."""
    running = [_raw_request(sandbox.sb.port, _payload(_sleeper(300, marker))) for _ in range(4)]
    deadline = time.monotonic() + 60
    while len(pids_with(marker)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = len(pids_with(marker))
    assert started >= 4, f"{started} of the four sleeping runs started within 60 s"
    return running


def test_a_client_that_hangs_up_frees_its_slot_and_its_queued_request_never_runs(
    sandbox, marker, pids_with, leftover_pids
):
    """Four clients hold every slot with `sleep` runs and two more queue behind them;
    all hang up. Their runs are killed, the queued ones never start, and the next
    request is answered at once (it waited 49 s for the gone clients' runs before)."""
    queued_marker = marker + "Q"
    running = _fill_slots(sandbox, marker, pids_with)
    queued = [_raw_request(sandbox.sb.port, _payload(_sleeper(30, queued_marker))) for _ in range(2)]
    time.sleep(0.5)
    for sock in running + queued:
        sock.close()
    start = time.monotonic()
    resp = httpx.post(sandbox.url, json={"code": "print('next')", "language": "python"}, timeout=10, trust_env=False)
    assert resp.json()["run_result"]["stdout"] == "next\n", resp.text
    assert time.monotonic() - start < 5, "the gone clients' runs held their slots"
    assert leftover_pids(marker) == [], "a gone client's run is still alive"
    # Had a queued request of a gone client started, its run would show up by now.
    for _ in range(10):
        assert pids_with(queued_marker) == [], "a gone client's queued request started"
        time.sleep(0.1)
    sandbox.assert_clean(marker)


def test_caps_are_checked_before_a_request_waits_for_a_slot(sandbox, marker, pids_with, leftover_pids):
    running = _fill_slots(sandbox, marker, pids_with)
    try:
        start = time.monotonic()
        _refused(sandbox.post("print(1)", memory_limit_MB=10**8), "max_memory_limit_mb")
        assert time.monotonic() - start < 3, "a refused request waited for a slot"
    finally:
        for sock in running:
            sock.close()
    assert leftover_pids(marker) == []
    sandbox.assert_clean(marker)


# ------------------------------------------- HTTP limits: a server with small limits


@pytest.fixture(scope="module")
def strict(work_dir_factory, sandbox_handle_cls, zygote_build_error):
    """A server with small HTTP limits: one run slot, 1 s read time-out, 8 connections,
    2 MB bodies, 3 MB of queued bodies, 1 MB files and stdin, 1 MB of fetched files."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    work_dir = work_dir_factory("strict")
    with EmbeddedSandbox(
        work_dir=work_dir,
        max_concurrency=1,
        launcher="bwrap" if zygote_build_error else "zygote",
        request_read_timeout_s=1.0,
        max_connections=8,
        max_request_body_mb=2,
        max_queued_request_mb=3,
        max_request_file_mb=1,
        max_stdin_mb=1,
        max_fetch_total_mb=1,
    ) as sb:
        handle = sandbox_handle_cls(sb, work_dir)
        yield handle
        handle.http.close()


def test_a_large_file_or_stdin_is_refused(strict):
    big = base64.b64encode(b"x" * ((1 << 20) + 1)).decode()
    resp = strict.http.post(strict.url, json={"code": "print(1)", "language": "python", "files": {"big": big}})
    _refused(resp, "max_request_file_mb")
    _refused(strict.post("print(1)", stdin="é" * ((1 << 19) + 1)), "max_stdin_mb")
    ok = strict.run("import sys; print(len(sys.stdin.read()))", stdin="x" * (1 << 19))
    assert ok["run_result"]["stdout"] == f"{1 << 19}\n", ok


def test_fetched_files_beyond_their_total_are_left_out_and_named(strict):
    code = "for name in ('a', 'b', 'c'):\n    open(name, 'wb').write(b'x' * 400_000)\n"
    resp = strict.run(code, fetch_files=["a", "b", "c", "absent"])
    assert sorted(resp["files"]) == ["a", "b"], sorted(resp["files"])
    assert "max_fetch_total_mb (1 MB" in resp["message"] and resp["message"].endswith(": c"), resp["message"]


def test_a_body_beyond_the_cap_gets_413(strict):
    body = _payload("#" * (2 << 20))
    resp = strict.http.post(strict.url, content=body, headers={"Content-Type": "application/json"})
    assert resp.status_code == 413 and "max_request_body_mb" in resp.text, resp.text

    def chunked():  # no Content-Length: the cap applies as the body arrives
        for i in range(0, len(body), 1 << 16):
            yield body[i : i + (1 << 16)]

    resp = strict.http.post(strict.url, content=chunked(), headers={"Content-Type": "application/json"})
    assert resp.status_code == 413 and "max_request_body_mb" in resp.text, resp.text
    assert strict.run("print(1)")["status"] == "Success"


def test_connections_stalled_in_their_headers_or_body_are_closed(strict):
    """Half a request line, headers without their end, a body short of its length: each
    connection is closed about `request_read_timeout_s` (1 s here) after it stalled."""
    port = strict.sb.port
    stalled = []
    for _ in range(3):
        in_headers = socket.create_connection(("127.0.0.1", port), timeout=10)
        in_headers.sendall(b"POST /run_code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
        stalled += [in_headers, _raw_request(port, b'{"code": "pri', content_length=1000)]
    start = time.monotonic()
    for sock in stalled:
        data, _ = _read_until_closed(sock, timeout=8)
        assert data == b"" or data.startswith(b"HTTP/1.1 408"), data[:200]
        if data:
            assert b"request_read_timeout_s" in data
        sock.close()
    assert time.monotonic() - start < 5, "stalled connections were not closed in time"
    assert strict.run("print(1)")["status"] == "Success"


def test_queued_bodies_beyond_their_bound_get_503_with_retry_after(strict, marker, pids_with, leftover_pids):
    """The one slot is busy; a 1.6 MB request queues behind it; a second one would hold
    more than max_queued_request_mb (3 MB) and gets 503 + Retry-After before its body is
    read. The queued one runs once the slot is free."""
    port = strict.sb.port
    busy = _raw_request(port, _payload(_sleeper(3, marker)))
    deadline = time.monotonic() + 10
    while not pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    padding = "#" * (1600 << 10)  # 1.6 MB of comment
    results: dict[str, httpx.Response] = {}
    queued = threading.Thread(target=lambda: results.update(first=strict.post(f"print('queued')\n{padding}")))
    queued.start()
    time.sleep(0.5)
    second = strict.post(f"print('second')\n{padding}")
    assert second.status_code == 503, second.text
    assert second.headers.get("Retry-After") == "1"
    assert "max_queued_request_mb" in second.text
    queued.join(20)
    assert results["first"].json()["run_result"]["stdout"] == "queued\n", results["first"].text
    data, _ = _read_until_closed(busy, timeout=10)
    assert b'"status":"Success"' in data, data[:300]
    busy.close()
    assert leftover_pids(marker) == []


def test_connections_beyond_the_limit_get_503_and_are_closed(strict):
    """Nine connections to a server allowing eight (one may be this module's keep-alive
    client's): any beyond the limit is answered 503 + Retry-After at once and closed;
    the others stay open until their header time-out."""
    port = strict.sb.port
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(9)]
    try:
        time.sleep(0.3)  # well inside the 1 s header time-out of those let in
        answered, _, _ = select.select(socks, [], [], 0)
        assert 1 <= len(answered) <= 2, f"{len(answered)} of 9 connections were answered at once"
        for sock in answered:
            data, took = _read_until_closed(sock, timeout=1)
            assert data.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in data, data
            assert b"max_connections" in data and took < 0.5, (data, took)
    finally:
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + 5
    while True:  # the closed connections give their places back
        try:
            if strict.ping():
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the server did not accept connections again"
        time.sleep(0.1)
    assert strict.run("print(1)")["status"] == "Success"
    assert strict.run_dirs() == []
