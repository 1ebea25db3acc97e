"""`python -m piexp ...` for tests, forked from a process that has already imported
piexp's third-party dependencies.

Most of a small job's CPU is importing torch (through tinker's types), transformers,
matplotlib and Hydra before any episode plays; a suite that runs a few hundred jobs spends
minutes of CPU doing it again for each. `run_piexp` hands the job to a per-worker launcher
process that imported those packages once and forks a child per job. The child is a real,
separate process: it takes the job's working directory, environment, standard streams
and command line, then runs `piexp` as `python -m piexp` would (`runpy`, `__main__`, the
interpreter's own exit: threads joined, atexit handlers run), and its exit status or
signal is the job's return code. piexp itself is imported afresh in every child, apart
from its self-contained tokenizer package: the launcher loads the offline Qwen3
tokenizer most jobs use (about 0.4 s of CPU each from its snapshot) into that package's
process-wide memo, which is keyed by the tokenizer file's content, so a job whose
tokenizer differs loads its own, and `PIEXP_TESTS_EXEC_JOBS=1` runs every load afresh.

What a forked job shares with the launcher is what was fixed when those packages were
imported: their import-time reads of the environment, `sys.flags`, the hash seed. So a job
is forked only when its environment equals the one the tests were collected with, apart
from variables read at run time (`PIEXP_*`, `TINKER_API_KEY`, `PYTEST_CURRENT_TEST`),
those of code the launcher does not import (`RAY_*`, `WANDB_*`, `TORCHINDUCTOR_*`), and
`PYTHONPATH` (applied to
the child's `sys.path` as the interpreter would); any other difference (`HOME`, `TZ`,
`PYTHONHASHSEED`, ...) runs it with a fresh interpreter. `PIEXP_TESTS_EXEC_JOBS=1` runs
every job with a fresh interpreter, and `PIEXP_TESTS_JOB_LOG=FILE` appends a line per job
saying how it started and which variables it set differently; tests/test_job_launcher.py
pins that both ways give the same run.

The launcher is single-threaded (fork in a threaded process can copy a held lock) and
exits when the process that started it is gone.
"""

from __future__ import annotations

import array
import atexit
import gc
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: What the launcher imports before it forks: the third-party packages a job imports
#: (what `python -X importtime -m piexp` shows costing most), never piexp's own modules.
PRELOAD = (
    "numpy",
    "yaml",
    "pydantic",
    "anyio",
    "httpx",
    "statistics",
    "rich.console",
    "rich.table",
    "omegaconf",
    "hydra",
    "hydra.compose",
    "hydra.core.override_parser.overrides_parser",
    "hydra._internal.core_plugins.basic_launcher",
    "hydra._internal.core_plugins.basic_sweeper",
    "hydra_plugins.hydra_joblib_launcher.joblib_launcher",
    "hydra_plugins.hydra_submitit_launcher.submitit_launcher",
    "torch",
    "tinker",
    "tinker_cookbook.completers",
    "tinker_cookbook.model_info",
    "tinker_cookbook.renderers",
    "tinker_cookbook.renderers.qwen3",
    "tinker_cookbook.rl.types",
    "tinker_cookbook.rl.rollouts",
    "tinker_cookbook.tool_use",
    "tokenizers",
    "transformers",
    "transformers.tokenization_utils_base",
    "transformers.tokenization_utils_tokenizers",
    "transformers.tokenization_utils_fast",
    "PIL.PngImagePlugin",
)
#: Variables a job may set differently from the launcher: read at run time (pytest names
#: the test running in PYTEST_CURRENT_TEST; nothing imported reads it), or read only by
#: code the launcher does not import, which the job imports itself: Ray (which also sets
#: RAY_CLIENT_MODE in the environment of the tests that import it), W&B, and torch's
#: compiler (torch._inductor, imported on first compile, not by `import torch`).
RUN_TIME_VARIABLES = ("PYTHONPATH", "TINKER_API_KEY", "PYTEST_CURRENT_TEST")
RUN_TIME_PREFIXES = ("PIEXP_", "RAY_", "WANDB_", "TORCHINDUCTOR_")
EXEC_ONLY = "PIEXP_TESTS_EXEC_JOBS"
#: A file to which each job appends how it started and the variables it set differently.
JOB_LOG = "PIEXP_TESTS_JOB_LOG"
READY = b"ready\n"
START_TIMEOUT_S = 300.0
#: The worker's environment as the tests were collected, before any test changed it: the
#: launcher's (a test that sets HOME for itself must not make it every job's).
WORKER_ENV = {key: value for key, value in os.environ.items() if key != "TINKER_API_KEY"}


def forkable(env: Mapping[str, str], launcher_env: Mapping[str, str]) -> bool:
    """Whether a job with environment `env` may be forked from a launcher started with
    `launcher_env`: equal apart from the variables piexp reads at run time."""

    def fixed(environment: Mapping[str, str]) -> dict[str, str]:
        return {
            key: value
            for key, value in environment.items()
            if key not in RUN_TIME_VARIABLES and not key.startswith(RUN_TIME_PREFIXES)
        }

    return fixed(env) == fixed(launcher_env)


# --- the launcher process --------------------------------------------------------------


def _serve(socket_path: str, parent: int) -> dict[str, Any] | None:
    """Accept jobs until the parent is gone; in a forked child, return its job."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    # A child's exit wakes the loop through this pipe (no thread, no polling).
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    os.write(1, READY)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection awaiting its status
    while os.getppid() == parent:
        readable, _, _ = select.select([listener, wake_read], [], [], 1.0)
        if wake_read in readable:
            os.read(wake_read, 4096)
        if listener in readable:
            connection, _ = listener.accept()
            job = _receive(connection)
            if job is None:
                connection.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_read, wake_write):
                    os.close(fd)
                listener.close()
                for other in waiting.values():
                    other.close()
                connection.close()
                return job
            for fd in job["fds"]:
                os.close(fd)
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = connection
        while waiting:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = waiting.pop(pid, None)
            if connection is not None:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                # The job's CPU and that of the processes it waited for: the launcher's
                # children are not the test's, so the test's CPU counts it from here.
                cpu_s = usage.ru_utime + usage.ru_stime
                try:
                    connection.sendall(json.dumps({"returncode": code, "cpu_s": cpu_s}).encode() + b"\n")
                except OSError:
                    pass  # the test stopped waiting (its timeout killed the job)
                connection.close()
    return None


def _receive(connection: socket.socket) -> dict[str, Any] | None:
    """The job a test sent, its stream fds included; None when the test hung up first."""
    fds = array.array("i")
    message, ancillary, _, _ = connection.recvmsg(1 << 20, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    while message and not message.endswith(b"\n"):
        chunk = connection.recv(1 << 20)
        message = message + chunk if chunk else b""
    if not message:
        for fd in fds:
            os.close(fd)
        return None
    job: dict[str, Any] = json.loads(message)
    job["fds"] = list(fds)
    return job


def _path_entries(environment: Mapping[str, str]) -> list[str]:
    """The folders PYTHONPATH names, as the interpreter puts them on sys.path."""
    return [entry for entry in environment.get("PYTHONPATH", "").split(os.pathsep) if entry]


def _become(job: dict[str, Any], base_path: list[str]) -> None:
    """In the forked child: take the job's streams, folder, environment and command line,
    and run piexp as `python -m piexp` does (SystemExit ends the interpreter normally)."""
    import runpy

    for target, fd in enumerate(job["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.path[:] = [os.getcwd(), *_path_entries(job["env"]), *base_path]
    _drop_preloaded_piexp_unless_found_first()
    # As `python -m piexp ARGS` starts: argv[0] becomes the module's path in runpy.
    sys.argv = ["-m", *job["args"]]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    runpy.run_module(job["module"], run_name="__main__", alter_sys=True)


def _drop_preloaded_piexp_unless_found_first() -> None:
    """The launcher's piexp modules (its tokenizer package) stand in for the job's only
    where the job's own sys.path finds the same piexp; otherwise the job imports its own."""
    import importlib.util

    preloaded = sys.modules.pop("piexp", None)
    if preloaded is None:
        return
    found = importlib.util.find_spec("piexp")
    if found is not None and found.origin == preloaded.__file__:
        sys.modules["piexp"] = preloaded
        return
    for name in [name for name in sys.modules if name.startswith("piexp.")]:
        del sys.modules[name]


def preload() -> None:
    """Import what the launcher holds for its children: PRELOAD, pyplot as piexp's plots
    select it, and piexp's offline Qwen3 tokenizer, loaded."""
    import importlib

    import matplotlib

    matplotlib.use("Agg")  # what piexp's plots select before importing pyplot
    importlib.import_module("matplotlib.pyplot")
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue  # a name another version of the package lacks: the job imports what it needs
    try:
        from piexp.tokenizer import load_offline_qwen3_tokenizer

        load_offline_qwen3_tokenizer()
    except Exception:  # noqa: BLE001 - each job then loads it itself, and reports what failed
        pass


def _launcher_main(socket_path: str) -> None:
    os.chdir("/")
    parent = os.getppid()
    # The interpreter's own entries (stdlib, site-packages), without the script's folder
    # and the launcher's PYTHONPATH: each child puts its folder and PYTHONPATH first.
    base_path = [entry for entry in sys.path[1:] if entry not in _path_entries(os.environ)]
    preload()
    # What the preload made is never garbage: frozen, a child's collections (and its
    # interpreter's last one, at exit) skip it instead of walking and so copying every
    # page of it, about 0.7 s of CPU a job on a 2-core machine.
    gc.freeze()
    job = _serve(socket_path, parent)
    if job is not None:
        _become(job, base_path)


# --- the test side ---------------------------------------------------------------------


class _Launcher:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="piexp-jobs-")
        self.socket_path = os.path.join(self.folder, "launcher.sock")
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.socket_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env=WORKER_ENV,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT_S)
        if not ready or self.process.stdout.readline() != READY:
            self.close()
            raise RuntimeError(f"the job launcher did not start within {START_TIMEOUT_S:.0f} s")
        atexit.register(self.close)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def run(
        self, args: Sequence[str], cwd: str, env: dict[str, str], timeout: float | None
    ) -> subprocess.CompletedProcess[str]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with (
            open(os.devnull, "rb") as stdin,
            tempfile.TemporaryFile() as stdout,
            tempfile.TemporaryFile() as stderr,
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection,
        ):
            connection.connect(self.socket_path)
            job = {"module": "piexp", "args": list(args), "cwd": cwd, "env": env}
            fds = array.array("i", [stdin.fileno(), stdout.fileno(), stderr.fileno()])
            connection.sendmsg([json.dumps(job).encode() + b"\n"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            replies = _Lines(connection)
            started = replies.next(None)
            if started is None:
                raise RuntimeError(f"the job launcher (pid {self.process.pid}) hung up before starting the job")
            pid = json.loads(started)["pid"]
            line = replies.next(deadline)
            timed_out = line is None
            if timed_out:
                os.kill(pid, signal.SIGKILL)
                line = replies.next(time.monotonic() + 60)
            reply = json.loads(line) if line else {"returncode": -signal.SIGKILL}
            returncode = reply["returncode"]
            _forked_cpu_s[0] += reply.get("cpu_s", 0.0)

            def read(file: Any) -> str:
                file.seek(0)
                return file.read().decode("utf-8", errors="replace")

            out, err = read(stdout), read(stderr)
        command = [sys.executable, "-m", "piexp", *args]
        if timed_out:
            raise subprocess.TimeoutExpired(command, timeout or 0, output=out, stderr=err)
        return subprocess.CompletedProcess(command, returncode, out, err)


class _Lines:
    """Newline-ended messages from a socket, each awaited until a deadline."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.buffer = b""

    def next(self, deadline: float | None) -> str | None:
        """The next line; None at the deadline or when the launcher closed the socket."""
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.connection], [], [], left)
            if not ready:
                return None
            chunk = self.connection.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


_launcher: _Launcher | None = None
_forked_cpu_s = [0.0]


def forked_jobs_cpu_s() -> float:
    """CPU seconds of the forked jobs this process has run, with the processes they waited
    for: a fresh job's CPU is already this process's children's, a forked one's is not."""
    return _forked_cpu_s[0]


def run_piexp(
    *args: str,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([sys.executable, "-m", "piexp", *args], capture_output=True, text=True)`:
    the same result, forked from the launcher when the environment allows it."""
    global _launcher
    environment = dict(os.environ if env is None else env)
    folder = str(Path(cwd) if cwd is not None else Path.cwd())
    fork = os.environ.get(EXEC_ONLY) != "1" and forkable(environment, WORKER_ENV)
    if os.environ.get(JOB_LOG):
        differing = sorted(key for key in {*environment, *WORKER_ENV} if environment.get(key) != WORKER_ENV.get(key))
        with open(os.environ[JOB_LOG], "a", encoding="utf-8") as log:
            print("forked" if fork else "fresh", *differing, file=log)
    if not fork:
        return subprocess.run(
            [sys.executable, "-m", "piexp", *args],
            cwd=folder,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if _launcher is None:
        _launcher = _Launcher()
    return _launcher.run(list(args), folder, environment, timeout)


if __name__ == "__main__":
    _launcher_main(sys.argv[1])
