"""How a sandbox is started: with either launcher, the run inside its own cgroups from
its first instruction and the /etc it sees (copied files, not binds); for bwrap, the
spawner thread that joins the run's cgroup v1 hierarchies (and always returns to the
server's own) and the slow path when it cannot. Runs a real Runner in this process."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import threading

import pytest

from piexp.sandbox.protocol import RunCodeRequest
from piexp.sandbox.runner import Runner, Timings
from piexp.sandbox.settings import SandboxSettings
from piexp.sandbox.spawn import Spawner

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def v1_thread_join(cgroup_support) -> None:
    if not cgroup_support["v1_thread_join"]:
        pytest.skip("no writable cgroup v1 hierarchies here (the spawner thread joins v1 only)")


def _run(runner: Runner, code: str, **extra) -> dict:
    async def go():
        return await runner.run(RunCodeRequest(code=code, language="python", **extra), Timings())

    return asyncio.run(go()).model_dump()


def _cgroups_of(tid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/self/task/{tid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            out[controllers] = path
    return out


@pytest.fixture(params=["zygote", "bwrap"])
def runner(work_dir, request, zygote_build_error):
    if request.param == "zygote" and zygote_build_error:
        pytest.skip(zygote_build_error)
    r = Runner.create(SandboxSettings(work_dir=work_dir, max_processes=64, launcher=request.param))
    assert (r.launcher.name == "zygote") == (request.param == "zygote"), "the zygote did not start (see the log)"
    yield r
    r.close()


@pytest.fixture
def bwrap_runner(work_dir):
    r = Runner.create(SandboxSettings(work_dir=work_dir, max_processes=64, launcher="bwrap"))
    yield r
    r.close()


def test_the_run_is_inside_its_own_cgroups_from_the_start(runner, v1_thread_join):
    """The run joined its cgroups before its cgroup namespace was unshared (bwrap: the
    spawner thread, before bwrap starts; zygote: the run's init, first thing), so inside
    the sandbox the run's own cgroup is the root of every joined hierarchy (the slow
    path, attaching bwrap's held init later, would show a subpath)."""
    resp = _run(runner, "print(open('/proc/self/cgroup').read())")
    lines = dict(line.split(":", 2)[1:] for line in resp["run_result"]["stdout"].split())
    assert lines["memory"] == "/" and lines["pids"] == "/", lines


def test_the_spawner_thread_returns_to_the_servers_cgroups(bwrap_runner, v1_thread_join):
    runner = bwrap_runner
    assert runner.host.spawner.joins_cgroups
    before = _cgroups_of(threading.get_native_id())
    _run(runner, "print(1)")
    spawner_threads = [t for t in threading.enumerate() if t.name.startswith("piexp-sandbox-spawner")]
    assert spawner_threads, "the run did not go through the spawner thread"
    for t in spawner_threads:
        assert _cgroups_of(t.native_id) == before


def test_without_the_thread_join_the_held_init_is_confined_instead(work_dir, v1_thread_join):
    """home_tasks unknown: the child starts outside the run's cgroups and is moved there
    at --block-fd; the memory limit still kills a bomb and says so."""
    r = Runner.create(SandboxSettings(work_dir=work_dir, max_processes=64, launcher="bwrap"))
    r.host.spawner = Spawner(None, r.host.spawner.user)
    try:
        resp = _run(r, "print(open('/proc/self/cgroup').read())")
        memory_path = [line.split(":", 2)[2] for line in resp["run_result"]["stdout"].split() if ":memory:" in line][0]
        assert memory_path != "/", "the init was not moved after the start (its cgroup root is the server's)"
        bomb = _run(r, "a = []\nwhile True:\n    a.append(bytearray(10**7))", memory_limit_MB=128, run_timeout=10)
        assert bomb["run_result"]["return_code"] != 0
        assert "[killed: the run exceeded its memory limit of 128 MB]" in bomb["run_result"]["stderr"]
        assert [d for d in os.listdir(r.host.area.path) if d.startswith("run-")] == []
    finally:
        r.close()
    assert os.listdir(work_dir) == []


def test_etc_holds_read_only_copies_of_what_the_loader_needs(runner):
    code = (
        "import os, hashlib\n"
        "print(sorted(os.listdir('/etc')))\n"
        "print(hashlib.sha256(open('/etc/ld.so.cache', 'rb').read()).hexdigest())\n"
        "try:\n    open('/etc/ld.so.cache', 'ab').write(b'x')\nexcept OSError as e:\n    print('write refused', e.errno)\n"
    )
    resp = _run(runner, code)
    out = resp["run_result"]["stdout"].splitlines()
    expected = sorted(
        e for e in ("alternatives", "ld.so.cache", "localtime", "nsswitch.conf") if os.path.lexists(f"/etc/{e}")
    )
    assert out[0] == str(expected)
    import hashlib

    with open("/etc/ld.so.cache", "rb") as f:
        assert out[1] == hashlib.sha256(f.read()).hexdigest()
    assert out[2].startswith("write refused"), out


def test_files_and_stdin_reach_a_program_started_by_the_spawner(runner):
    resp = _run(
        runner,
        "import sys\nprint(open('in.txt').read().strip(), sys.stdin.read().strip())",
        files={"in.txt": base64.b64encode(b"from-file").decode()},
        stdin="from-stdin",
    )
    assert resp["run_result"]["stdout"] == "from-file from-stdin\n", resp


def test_a_runtime_the_sandbox_cannot_exec_is_the_sandboxs_failure_not_the_programs_exit(runner):
    """A sandbox whose runtime cannot be exec'd (here a binary that is not there) never ran
    the program: bwrap then exits 1 after its init was reported and released, which the
    program's own `exit 1` also gives. Both launchers must answer SandboxError (what the
    environments read as piexp's failure: played again, never scored), never a run that
    finished with exit code 1 or failed with no exit code (a crash or a time-out the model
    would be scored for)."""
    from piexp.sandbox.isolation.layout import Runtime

    runner.host.runtimes["python"] = Runtime(binary="/usr/bin/piexp-no-such-runtime", bind_prefix=None)
    out = _run(runner, "print(1)")
    assert out["status"] == "SandboxError" and out["run_result"] is None, out
    assert "set up the sandbox" in out["message"], out


def _recorded_starts(monkeypatch) -> list[tuple[list[str], object]]:
    """Every process this test's process starts from now on: its argv and preexec function."""
    import subprocess

    started: list[tuple[list[str], object]] = []
    popen_init = subprocess.Popen.__init__

    def recorded(self, args, *rest, **options):
        started.append((list(args), options.get("preexec_fn")))
        popen_init(self, args, *rest, **options)

    monkeypatch.setattr(subprocess.Popen, "__init__", recorded)
    return started


def test_as_the_run_user_bwrap_gets_its_limits_from_programs_it_execs_not_from_python_in_the_fork(
    work_dir, monkeypatch
):
    """A preexec function makes CPython re-initialise its interpreter state in a fork of
    the whole (threaded) process, which deadlocks when another thread held the
    thread-state lock at the fork: the spawn then waits for that child forever, and so
    does every run queued behind it. As the run user, bwrap is started with no preexec
    function: util-linux's prlimit and setpriv, exec'd in place first, give it the run's
    rlimits and its parent-death signal, and the program sees those limits."""
    runner = Runner.create(SandboxSettings(work_dir=work_dir, max_processes=64, max_open_files=200, launcher="bwrap"))
    try:
        if runner.launcher.host.spawner.user is None:
            pytest.skip("this sandbox has no run user (it needs root or CAP_SETUID)")
        started = _recorded_starts(monkeypatch)
        code = "import json, resource as r; print(json.dumps([r.getrlimit(x) for x in (r.RLIMIT_NOFILE, r.RLIMIT_CORE, r.RLIMIT_FSIZE)]))"
        result = _run(runner, code)["run_result"]
    finally:
        runner.close()
    assert result["return_code"] == 0, result
    nofile, core, fsize = json.loads(result["stdout"])
    assert nofile == [200, 200] and core == [0, 0] and fsize[0] == fsize[1] > 0
    bwrap_starts = [(argv, preexec) for argv, preexec in started if any(arg.endswith("bwrap") for arg in argv)]
    assert bwrap_starts, started
    for argv, preexec in bwrap_starts:
        assert preexec is None
        assert os.path.basename(argv[0]) == "prlimit" and "--nofile=200:200" in argv
        setpriv = argv.index("--") + 1
        assert os.path.basename(argv[setpriv]) == "setpriv" and argv[setpriv + 1 : setpriv + 3] == [
            "--pdeathsig",
            "KILL",
        ]


def test_an_unisolated_program_starts_in_its_cgroups_with_no_python_in_the_fork(work_dir, monkeypatch, v1_thread_join):
    """Where bubblewrap is missing and unisolated runs are allowed, the program is a plain
    child of the server. With cgroup v1 the spawner thread joins the run's cgroups and
    the child starts inside them, and prlimit and setpriv, exec'd in place, give it its
    rlimits and parent-death signal: no preexec function, which can deadlock the fork of
    the threaded server (as bwrap's start above). The program sees its limits, its
    parent-death signal and its run's cgroups."""
    import piexp.sandbox.runner as runner_module

    monkeypatch.setattr(runner_module, "bwrap_path", lambda: None)
    runner = Runner.create(
        SandboxSettings(work_dir=work_dir, max_processes=64, max_open_files=200, allow_unisolated=True)
    )
    try:
        assert runner.launcher.name == "unisolated"
        started = _recorded_starts(monkeypatch)
        code = (
            "import ctypes, json, resource as r, signal\n"
            "death = ctypes.c_int(0)\n"
            "ctypes.CDLL(None).prctl(2, ctypes.byref(death), 0, 0, 0)  # PR_GET_PDEATHSIG\n"
            "print(json.dumps({'nofile': r.getrlimit(r.RLIMIT_NOFILE), 'death': death.value,\n"
            "                  'cgroups': open('/proc/self/cgroup').read()}))\n"
        )
        result = _run(runner, code)["run_result"]
    finally:
        runner.close()
    assert result["return_code"] == 0, result
    seen = json.loads(result["stdout"])
    assert seen["nofile"] == [200, 200] and seen["death"] == signal.SIGKILL, seen
    memory = [line for line in seen["cgroups"].splitlines() if ":memory:" in line]
    assert memory and "/run-" in memory[0], seen["cgroups"]  # the run's own memory cgroup
    (argv, preexec), *_ = [(argv, preexec) for argv, preexec in started if "python" in " ".join(argv)]
    assert preexec is None, argv
    assert os.path.basename(argv[0]) == "prlimit" and "--nofile=200:200" in argv, argv
