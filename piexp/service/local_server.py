"""Start SkyRL's Tinker API server + engine on loopback, wait until it answers, stop it.

The server runs from the server venv's own interpreter through the launcher in
``piexp/service/compat/skyrl_server/``; the API server starts the engine as its
child. Both are in a new process group (``start_new_session``) so stopping kills the
whole group, and both ask the kernel for SIGKILL when their parent dies
(``PR_SET_PDEATHSIG``), so no orphan is left even if piexp is killed with SIGKILL.
Server state (sqlite database, checkpoints) lives in ``state_dir``; keeping it in the
run folder is what lets a rerun resume from the ``tinker://`` checkpoints recorded
there. Compiled JAX programs go to a persistent cache shared by every server on the
machine (:func:`compilation_cache_env`), so only the first run with a given model and
shapes pays for compiling them. The server allocates its memory with tcmalloc where it is
installed (:mod:`piexp.allocator`).
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from piexp.allocator import allocator_env
from piexp.errors import ServiceUnavailableError
from piexp.sandbox.embedded import bound_listening_socket

__all__ = ["LocalServer", "compilation_cache_env", "default_compilation_cache_dir"]

HEALTH_PATH = "/api/v1/healthz"

#: Upper bound of the compilation cache on disk (least recently used entries go first).
#: Setting a bound also makes JAX take a file lock around every read and write of the
#: cache (jax 0.12 ``LRUCache``; without one it writes entries in place, unlocked), so
#: concurrent servers (a sweep) never read an entry another one is half-way through writing.
COMPILATION_CACHE_MAX_BYTES = 4 << 30


def default_compilation_cache_dir() -> Path:
    from piexp.tokenizer import piexp_cache_dir

    return piexp_cache_dir() / "jax-compilation-cache"


def compilation_cache_env(directory: Path) -> dict[str, str]:
    """Environment that makes the server's JAX use a persistent compilation cache in
    ``directory``: every compiled program is written (no minimum compile time or size),
    and a later process with the same program, shapes, jax/jaxlib version and CPU loads it
    instead of compiling it (JAX keys entries by all of those)."""
    return {
        "JAX_COMPILATION_CACHE_DIR": str(directory),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        "JAX_COMPILATION_CACHE_MAX_SIZE": str(COMPILATION_CACHE_MAX_BYTES),
    }


def _answers(url: str, timeout_s: float = 2.0) -> bool:
    import httpx

    try:
        return httpx.get(url + HEALTH_PATH, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields: state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return sorted(members)


@dataclass
class LocalServer:
    """One server process tree. ``start()`` returns once the API answers."""

    python: Path
    base_model: str
    state_dir: Path
    max_lora_rank: int = 32
    # Adapter slots (slot 0 is the base model). skyrl's JAX backend keeps weights,
    # gradients and optimizer state for every slot: about 1.25 GB each for tiny-local on
    # CPU (16 slots: 21 GB, and 4x slower steps). A run needs 2 models at a time (warm
    # start, then RL); a resume runs in a fresh server.
    max_lora_adapters: int = 4
    # One sequence per micro-batch: with Qwen3's 152k vocabulary a [batch, 4096, vocab]
    # logits block is 2.5 GB per sequence in float32, which a whole batch on a CPU
    # machine's memory cannot hold.
    train_micro_batch_size: int = 1
    # Positions per log-softmax chunk: chunks without a loss position are skipped
    # (piexp/service/compat/skyrl_server/speedups.py, item 1), so smaller chunks skip more
    # of the prompt and observations.
    loss_chunk_size: int = 128
    gradient_checkpointing: bool = False
    # Where compiled JAX programs persist between runs (shared by concurrent servers);
    # None compiles everything again in every run.
    compilation_cache_dir: Path | None = field(default_factory=default_compilation_cache_dir)
    start_timeout_s: float = 180.0
    # Preload tcmalloc into the server where it is installed (piexp.allocator); False
    # keeps glibc's malloc (bench/allocator.py measures both).
    tcmalloc: bool = True
    host: str = "127.0.0.1"
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    start_s: float | None = field(default=None, init=False)
    allocator: str | None = field(default=None, init=False)  # the allocator it started with

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        # The state folder is a run folder's LOCAL_SERVICE_DIR: its log is SERVER_LOG there.
        return self.state_dir / Path(RunFolder.SERVER_LOG).name

    def backend_config(self) -> dict[str, object]:
        """skyrl's JAX backend settings the server runs with (also what a check or bench
        script gives the backend to measure it as the server runs it)."""
        return {
            "max_lora_adapters": self.max_lora_adapters,
            "max_lora_rank": self.max_lora_rank,
            "train_micro_batch_size": self.train_micro_batch_size,
            "loss_chunk_size": self.loss_chunk_size,
            "gradient_checkpointing": self.gradient_checkpointing,
        }

    def command(self, launcher: Path, listen_fd: int | None = None) -> list[str]:
        import json

        backend = self.backend_config()
        return [
            str(self.python), str(launcher), "api", "--host", self.host, "--port", str(self.port),
            "--base-model", self.base_model, "--backend", "jax", "--backend-config", json.dumps(backend),
            "--checkpoints-base", str(self.state_dir / "checkpoints"),
            "--database-url", f"sqlite:///{self.state_dir / 'tinker.db'}",
            *(["--listen-fd", str(listen_fd)] if listen_fd is not None else []),
        ]  # fmt: skip

    def start(self) -> LocalServer:
        from piexp.service.compat import write_launcher

        if threading.current_thread() is not threading.main_thread():
            # PR_SET_PDEATHSIG fires when the *thread* that started the child exits.
            raise RuntimeError("start the local server from the main thread")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        launcher = write_launcher(self.state_dir)
        # Bound and listening before the server starts, then handed to it: the port is
        # ours throughout, so the readiness probe below can only reach this server.
        listener = bound_listening_socket(self.host, self.port or 0)
        self.port = listener.getsockname()[1]
        preload, self.allocator = allocator_env(self.tcmalloc)
        env = {
            **os.environ,
            "PIEXP_SERVER_PARENT_PID": str(os.getpid()),
            "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            **(compilation_cache_env(self.compilation_cache_dir) if self.compilation_cache_dir else {}),
            **preload,
        }
        env.pop("TINKER_API_KEY", None)  # the server needs no key; never hand a real one on
        started = time.monotonic()
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        try:
            self.process = subprocess.Popen(
                self.command(launcher, listener.fileno()), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.state_dir, env=env, start_new_session=True,
                pass_fds=(listener.fileno(),),
            )  # fmt: skip
        finally:
            log.close()
            listener.close()  # the server owns it now
        deadline = started + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self._log_tail()
                self.stop()
                raise ServiceUnavailableError(
                    f"The local SkyRL server exited during start-up (exit {self.process.returncode}); "
                    f"log {self.log_path}: ...{tail}"
                )
            if _answers(self.url):
                self.start_s = time.monotonic() - started
                return self
            time.sleep(0.5)
        self.stop()
        raise ServiceUnavailableError(
            f"The local SkyRL server did not answer within {self.start_timeout_s:g} s "
            f"(service.start_timeout_s); log {self.log_path}: ...{self._log_tail()}"
        )

    def _log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """The server's live processes (API server and engine: its process group), for
        tests and memory figures."""
        if self.process is None:
            return []
        return _group_members(self.process.pid)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after ``grace_s``."""
        process = self.process
        if process is None:
            return
        pgid = process.pid  # start_new_session: the group id is the leader's pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
