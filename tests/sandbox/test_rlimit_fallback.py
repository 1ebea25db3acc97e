"""Memory limits when no cgroup is writable: per-runtime rlimits (python RLIMIT_AS, node
--max-old-space-size + RLIMIT_DATA) must contain a bomb without breaking node."""

from __future__ import annotations

import shutil

import pytest

from piexp.sandbox import EmbeddedSandbox


@pytest.fixture(scope="module")
def rl_sandbox(work_dir_factory, sandbox_handle_cls):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    work_dir = work_dir_factory("rl")
    with EmbeddedSandbox(work_dir=work_dir, use_cgroups=False, max_concurrency=2, default_memory_limit_mb=512) as sb:
        h = sandbox_handle_cls(sb, work_dir)
        yield h
        h.http.close()


def test_python_memory_bomb_rlimit(rl_sandbox):
    resp = rl_sandbox.run("a = []\nwhile True:\n    a.append(bytearray(10**7))", run_timeout=10, memory_limit_MB=256)
    rr = resp["run_result"]
    assert rr["status"] == "Finished" and rr["return_code"] != 0 and "MemoryError" in rr["stderr"]
    rl_sandbox.assert_clean()


def test_node_memory_bomb_rlimit(rl_sandbox):
    resp = rl_sandbox.run(
        "const a = []; for (;;) a.push(new Array(1e6).fill(1.5));", "nodejs", run_timeout=15, memory_limit_MB=256
    )
    rr = resp["run_result"]
    assert rr["status"] == "Finished" and rr["return_code"] != 0
    assert "heap out of memory" in rr["stderr"], rr["stderr"][-500:]
    rl_sandbox.assert_clean()


def test_node_gets_the_heap_flag_without_a_cgroup(rl_sandbox):
    resp = rl_sandbox.run("console.log(JSON.stringify(process.execArgv))", "nodejs", memory_limit_MB=256)
    assert resp["run_result"]["stdout"] == '["--max-old-space-size=192"]\n', resp


def test_node_still_works_under_rlimits(rl_sandbox):
    resp = rl_sandbox.run("const b = Buffer.alloc(64*1024*1024, 1); console.log(b.length)", "nodejs")
    assert resp["status"] == "Success", resp
