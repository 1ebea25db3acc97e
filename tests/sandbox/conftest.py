"""Shared fixtures: one embedded sandbox server per test module, with a fake secret in
its environment and a dedicated work dir so tests can assert nothing is left behind."""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
import uuid

import httpx
import pytest

from piexp.sandbox import EmbeddedSandbox

FAKE_SECRET = "sk-test-secret"

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="session")
def cgroup_support() -> dict[str, bool]:
    """What a server started by this test process gets from cgroups (the same detection
    the server runs; the probe's parent dirs are removed again): `memory` (a memory
    cgroup limits runs), `pids` (a pids cgroup counts their processes) and `v1_thread_join`
    (the spawner thread joins v1 cgroups)."""
    from piexp.sandbox.isolation import detect_cgroups

    limiter = detect_cgroups()
    if limiter is None:
        return {"memory": False, "pids": False, "v1_thread_join": False}
    try:
        return {
            "memory": limiter.limits_memory,
            "pids": limiter.limits_pids,
            "v1_thread_join": limiter.kind == "v1" and limiter.home_tasks is not None,
        }
    finally:
        limiter.close()


@pytest.fixture(scope="session")
def memory_cgroup(cgroup_support) -> bool:
    return cgroup_support["memory"]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _another_test_sessions(pid: int, me: int) -> bool:
    """Whether `pid` descends from another pytest process than this one (a second test
    session on the machine); orphans, reparented to init, count as this test session's."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid == me:
            return False
        if "pytest" in _cmdline(pid):
            return True
        pid, seen = _parent(pid), seen + 1
    return False


def _ancestors(pid: int) -> list[int]:
    """`pid`'s parent, its parent, and so on, up to (not including) init."""
    chain: list[int] = []
    pid = _parent(pid)
    while pid > 1 and len(chain) < 64:
        chain.append(pid)
        pid = _parent(pid)
    return chain


def _the_servers(pid: int, server: int) -> bool:
    """Whether `pid` is the sandbox server `server`'s: below it (the server is a child
    subreaper, so its runs' orphans stay below it too), or an orphan no other process
    claims (below init and no piexp or pytest process: possibly one of its runs that
    escaped, so counted). The programs of other piexp runs on the machine (an eval beside
    the suite, a second server of this test session) are below their own servers: not its."""
    ancestors = _ancestors(pid)
    if server in ancestors:
        return True
    return not any("piexp" in _cmdline(p) or "pytest" in _cmdline(p) for p in ancestors)


def processes_with(marker: str, server: int | None = None) -> list[tuple[int, str]]:
    """The processes whose command line contains `marker` (a /proc scan, no psutil): the
    sandbox server `server`'s (see `_the_servers`), or without one, this test session's."""
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        cmd = _cmdline(int(entry))
        if marker not in cmd:
            continue
        if _the_servers(int(entry), server) if server is not None else not _another_test_sessions(int(entry), me):
            found.append((int(entry), cmd))
    return found


def wait_no_processes(marker: str, timeout: float = 5.0, server: int | None = None) -> list[tuple[int, str]]:
    deadline = time.monotonic() + timeout
    while True:
        left = processes_with(marker, server)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


class SandboxHandle:
    def __init__(self, sb: EmbeddedSandbox, work_dir: str):
        self.sb = sb
        self.url = sb.url
        self.work_dir = work_dir
        self.http = httpx.Client(timeout=120, trust_env=False)

    def post(self, code: str, language: str = "python", files: dict[str, str] | None = None, **extra) -> httpx.Response:
        payload = {
            "code": code,
            "language": language,
            "files": {k: base64.b64encode(v.encode()).decode() for k, v in (files or {}).items()},
            **extra,
        }
        return self.http.post(self.url, json=payload)

    def run(self, code: str, language: str = "python", files=None, **extra) -> dict:
        r = self.post(code, language, files, **extra)
        assert r.status_code == 200, r.text
        return r.json()

    def ping(self) -> bool:
        return self.http.get(self.sb.base_url + "/v1/ping").status_code == 200

    def run_dirs(self) -> list[str]:
        """The run directories (and run /tmp directories) in the server's run area."""
        return [
            os.path.join(self.work_dir, area, d)
            for area in os.listdir(self.work_dir)
            for d in os.listdir(os.path.join(self.work_dir, area))
            if d.startswith("run-")
        ]

    def assert_clean(self, marker: str | None = None) -> None:
        """The server still answers, no run process of its own and no run directory is left
        (other piexp runs' sandboxed programs on the machine are theirs, not leftovers)."""
        assert self.ping()
        assert self.sb.proc is not None
        for m in filter(None, [marker, "_sandbox_main", "piexp-sbx-"]):
            assert wait_no_processes(m, server=self.sb.proc.pid) == [], f"leftover processes for {m!r}"
        # A run's directories go right after its processes (a cancelled run's too).
        deadline = time.monotonic() + 5
        while self.run_dirs() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.run_dirs() == [], "leftover run directories"
        assert len(os.listdir(self.work_dir)) == 1, "one run area, the server's"


def make_work_dir(name: str) -> str:
    """A server work dir the run user can reach (pytest's own temp dirs are 0700 root's,
    which a server running as root refuses: its runs execute as an unprivileged uid)."""
    path = tempfile.mkdtemp(prefix=f"piexp-test-{name}-", dir="/tmp")
    os.chmod(path, 0o755)
    return path


@pytest.fixture(scope="session")
def work_dir_factory():
    """`make_work_dir` for modules; every dir made is removed at the end of the session."""
    made: list[str] = []

    def make(name: str) -> str:
        made.append(make_work_dir(name))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def work_dir(work_dir_factory) -> str:
    return work_dir_factory("fn")


@pytest.fixture(scope="session")
def zygote_build_error() -> str | None:
    """Why the zygote launcher cannot be built here (a skip reason), or None."""
    from piexp.sandbox.launchers.zygote_client import ZygoteError, zygote_binary

    try:
        zygote_binary()
    except ZygoteError as exc:
        return f"the zygote cannot be built here ({exc}); only the bwrap launcher is tested"
    return None


@pytest.fixture(scope="module", params=["zygote", "bwrap"])
def sandbox(tmp_path_factory, request, zygote_build_error, work_dir_factory):
    """The server every containment test runs against, once per launcher (both must
    contain a run identically)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    if request.param == "zygote" and zygote_build_error:
        pytest.skip(zygote_build_error)
    work_dir = work_dir_factory("sbx")
    log_path = str(tmp_path_factory.mktemp("sbx-log") / "server.log")
    with EmbeddedSandbox(
        env={"TINKER_API_KEY": FAKE_SECRET},
        work_dir=work_dir,
        max_concurrency=4,
        max_processes=64,
        max_file_size_mb=16,
        default_memory_limit_mb=512,
        output_cap_bytes=1 << 20,
        log_path=log_path,
        launcher=request.param,
    ) as sb:
        with open(log_path) as f:
            started = f.read()
        # The zygote falls back to bwrap by itself: make sure it is the one tested.
        assert ("launcher=zygote" in started) == (request.param == "zygote"), started
        handle = SandboxHandle(sb, work_dir)
        handle.launcher = request.param
        yield handle
        handle.http.close()


@pytest.fixture(scope="session")
def pids_with():
    """`processes_with`'s pids, for modules (no cross-module imports, see below)."""
    return lambda marker: [pid for pid, _ in processes_with(marker)]


@pytest.fixture(scope="session")
def leftover_pids():
    """Pids whose command line contains the marker once none are left or after 5 s."""
    return lambda marker: [pid for pid, _ in wait_no_processes(marker)]


@pytest.fixture(scope="session")
def sandbox_handle_cls():
    """SandboxHandle for modules that start their own server (no cross-module imports,
    which would depend on pytest's import mode)."""
    return SandboxHandle


@pytest.fixture
def marker() -> str:
    return f"PIEXPMARK{uuid.uuid4().hex[:12]}"
