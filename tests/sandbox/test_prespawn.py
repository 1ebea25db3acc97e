"""`prespawn`: sandboxes started ahead of requests must be exactly as contained as cold
ones, used once, and all gone when the server stops. (Idle pre-started sandboxes are
expected between requests, so the leftover checks here look for each run's own marker.)"""

from __future__ import annotations

import os
import resource
import shutil

import pytest

from piexp.sandbox import EmbeddedSandbox

FAKE_SECRET = "sk-test-secret"


def _idle_sandboxes(work_dir: str) -> list[str]:
    """The run directories in the server's run area (each pre-started sandbox has one
    and its /tmp)."""
    return sorted(
        d
        for area in os.listdir(work_dir)
        for d in os.listdir(os.path.join(work_dir, area))
        if d.startswith("run-") and not d.endswith(".tmp")
    )


@pytest.fixture(scope="module")
def pre(work_dir_factory, sandbox_handle_cls, leftover_pids):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    work_dir = work_dir_factory("pre")
    with EmbeddedSandbox(
        env={"TINKER_API_KEY": FAKE_SECRET},
        work_dir=work_dir,
        max_concurrency=4,
        max_processes=64,
        max_file_size_mb=16,
        default_memory_limit_mb=512,
        prespawn=1,
        launcher="bwrap",
    ) as sb:
        h = sandbox_handle_cls(sb, work_dir)
        yield h
        h.http.close()
    # Stopping the server disposes of the idle pre-started sandboxes too.
    assert leftover_pids(work_dir) == []
    assert os.listdir(work_dir) == []


def test_runs_with_files_stdin_fetch(pre):
    for _ in range(3):  # the first run is cold, the next ones use pre-started sandboxes
        resp = pre.run(
            "import sys\nn = int(open('n.txt').read()) + int(sys.stdin.read())\n"
            "open('out.txt', 'w').write(str(n))\nprint(n)\n",
            files={"n.txt": "40"},
            stdin="2",
            fetch_files=["out.txt"],
        )
        assert resp["status"] == "Success", resp
        assert resp["run_result"]["stdout"] == "42\n"
        assert resp["files"]["out.txt"] == "NDI="
        js = pre.run("console.log(require('fs').readFileSync('n.txt', 'utf8'))", "nodejs", files={"n.txt": "7"})
        assert js["status"] == "Success" and js["run_result"]["stdout"] == "7\n", js


def test_each_sandbox_is_used_once(pre, marker):
    """Nothing of one run (run dir, /tmp, processes) is visible to the next."""
    first = pre.run(f"open('/tmp/{marker}', 'w').write('x'); open('{marker}', 'w').write('x'); print('ok')")
    assert first["status"] == "Success", first
    second = pre.run(
        f"import os; print(os.path.exists('/tmp/{marker}'), os.path.exists('{marker}'), sorted(os.listdir('.')))"
    )
    assert second["run_result"]["stdout"] == "False False ['_sandbox_main.py']\n", second


def test_limits_and_cgroups_apply_to_the_request(pre, cgroup_support):
    """Each request's CPU limit, the file size limit, the process limit (a pids cgroup,
    else RLIMIT_NPROC). A server running as root starts its sandboxes as the run user
    and may not change another uid's limits without CAP_SYS_RESOURCE: a pre-started
    sandbox then keeps the largest CPU limit, and the wall-time limit ends it on time."""
    code = (
        "import resource\n"
        "print(resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_NPROC),"
        " resource.getrlimit(resource.RLIMIT_FSIZE))\n"
    )
    nproc = resource.getrlimit(resource.RLIMIT_NPROC) if cgroup_support["pids"] else (64, 64)
    for timeout in (3, 30, 3, 30):
        resp = pre.run(code, run_timeout=timeout)
        cpus = {timeout + 1} if os.geteuid() != 0 else {timeout + 1, 601}  # cold or pre-started
        assert resp["run_result"]["stdout"] in {
            f"({cpu}, {cpu + 1}) {nproc} ({16 << 20}, {16 << 20})\n" for cpu in cpus
        }, resp
    slow = pre.run("while True: pass", run_timeout=2)
    assert slow["run_result"]["status"] == "TimeLimitExceeded" and slow["run_result"]["execution_time"] < 4, slow


def test_isolation_holds(pre, marker):
    for _ in range(2):
        resp = pre.run(
            "import os, socket\n"
            "print(os.getuid(), os.getgid(), os.getpid())\n"
            "print('TINKER_API_KEY' in os.environ, open('/proc/1/environ').read().count('sk-'))\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); print('CONNECTED')\n"
            "except OSError:\n    print('blocked')\n"
            f"for t in ['/usr/{marker}', '/etc/{marker}', '../{marker}']:\n"
            "    try:\n        open(t, 'w'); print('wrote', t)\n    except OSError:\n        print('refused')\n"
            "print(os.path.exists('/work'))\n"
        )
        out = resp["run_result"]["stdout"].splitlines()
        assert out[0] == "65534 65534 2", out
        assert out[1] == "False 0" and out[2] == "blocked" and out[3:6] == ["refused"] * 3 and out[6] == "False", out
        assert FAKE_SECRET not in resp["run_result"]["stdout"]


def test_time_limit_memory_and_detached_children(pre, marker, leftover_pids):
    resp = pre.run(f"# {marker}\nwhile True: pass", run_timeout=1)
    assert resp["run_result"]["status"] == "TimeLimitExceeded"
    resp = pre.run("a = []\nwhile True:\n    a.append(bytearray(10**7))", run_timeout=10, memory_limit_MB=256)
    assert resp["status"] == "Failed" and resp["run_result"]["return_code"] != 0
    resp = pre.run("a = []\nwhile True:\n    a.append(bytearray(10**7))", run_timeout=10)  # default limit: 512
    assert resp["status"] == "Failed" and resp["run_result"]["return_code"] != 0
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execvp('sh', ['sh', '-c', 'sleep 300; echo {marker}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\nprint('parent done')\n"
    )
    resp = pre.run(code, run_timeout=10)
    assert resp["run_result"]["stdout"] == "parent done\n"
    assert leftover_pids(marker) == []
    # The fork bomb is bounded too, and the server still answers afterwards.
    resp = pre.run(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", run_timeout=2
    )
    assert resp["status"] == "Failed"
    assert pre.run("print('alive')")["run_result"]["stdout"] == "alive\n"
    # At rest: only the pre-started sandboxes (one per language used) remain.
    assert len(_idle_sandboxes(pre.work_dir)) <= 2
