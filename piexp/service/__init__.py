"""Where training and sampling run: Tinker, a local SkyRL server, or a self-hosted one.

`open_service(config, run_dir)` is the single entry: it yields the run config with
`service.base_url` and `model.name` resolved for the run, and tears down whatever it
started. Modules, one job each:

* `local_venv`: the server's own virtual environment (created once, cached);
* `tiny_model`: the `tiny-local` model folder (random weights, a smaller vocabulary of the real Qwen3 tokenizer);
* `compat`: every SkyRL workaround, and the pins of every third-party hook, checked at start;
* `local_server`: start / wait / stop of the server process tree.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from piexp.config.schema import RunConfig
from piexp.console import console, say
from piexp.errors import ServiceUnavailableError


__all__ = ["LOCAL_API_KEY", "open_service", "placeholder_api_key"]

#: What the tinker SDK gets as API key for a local or self-hosted server: it insists on
#: one (with the ``tml-`` prefix) even when the server checks nothing. Only ever set in
#: this process's environment for the duration of the run; never written anywhere.
LOCAL_API_KEY = "tml-local-no-key"


@contextlib.contextmanager
def placeholder_api_key(*, override: bool) -> Iterator[None]:
    """Set ``TINKER_API_KEY`` to :data:`LOCAL_API_KEY` for the duration (when unset, or
    always with ``override``) and restore the previous value afterwards."""
    previous = os.environ.get("TINKER_API_KEY")
    if override or not (previous or "").strip():
        os.environ["TINKER_API_KEY"] = LOCAL_API_KEY
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TINKER_API_KEY", None)
        else:
            os.environ["TINKER_API_KEY"] = previous


def _resolved(config: RunConfig, base_url: str, model_name: str | None = None) -> RunConfig:
    update: dict[str, Any] = {"service": config.service.model_copy(update={"base_url": base_url})}
    if model_name is not None:
        update["model"] = config.model.model_copy(update={"name": model_name})
    return config.model_copy(update=update)


def _model_name(config: RunConfig) -> str:
    from piexp.service.tiny_model import TINY_LOCAL_NAME, ensure_tiny_model

    name = str(ensure_tiny_model()) if config.model.name == TINY_LOCAL_NAME else config.model.name
    if Path(name).is_absolute() and Path(name).is_dir():
        # A local model folder (tiny-local, learner-local, or one given by path): the
        # thread-safe offline Qwen3 tokenizer for it, as for the Qwen3 names.
        from piexp.tokenizer import register_offline_tokenizer

        register_offline_tokenizer(name)
    return name


def _state_dir(config: RunConfig, run_dir: Path) -> Path:
    """The local server's state (database, checkpoints): the run's own, or, when an eval
    names a training run folder as `checkpoint=`, that run's (where its checkpoints are)."""
    if config.checkpoint:
        from piexp.checkpoint_source import resolve_checkpoint

        source = resolve_checkpoint(config.checkpoint).run_dir
        if source is not None:
            return source / RunFolder.LOCAL_SERVICE_DIR
    return run_dir / RunFolder.LOCAL_SERVICE_DIR


@contextlib.contextmanager
def open_service(config: RunConfig, run_dir: Path) -> Iterator[RunConfig]:
    """Make the configured service usable for this run and yield the resolved config."""
    service = config.service
    if service.name == "tinker":
        from piexp.service.compat.pins import check_service_pins
        from piexp.service.tinker_preflight import preflight_tinker

        preflight_tinker(service.base_url, service.connect_timeout_s)
        check_service_pins(proxy=False)
        yield config
        return

    from piexp.service.compat import SampleIdProxy, check_service_pins

    if service.name == "selfhosted":
        from piexp.service.tinker_preflight import preflight_tinker

        assert service.url is not None
        with placeholder_api_key(override=False):
            preflight_tinker(service.url, service.connect_timeout_s, url_key="service.url")
            check_service_pins(proxy=service.compat_proxy)
            if not service.compat_proxy:
                yield _resolved(config, service.url.rstrip("/"))
                return
            with SampleIdProxy(service.url, seed=config.seed) as proxy:
                yield _resolved(config, proxy.url)
        return

    # service=local
    from piexp.allocator import TCMALLOC
    from piexp.service.local_server import LocalServer
    from piexp.service.local_venv import ensure_server_venv, venv_python

    venv = ensure_server_venv()
    check_service_pins(proxy=True, server_python=venv_python(venv))
    model_name = _model_name(config)
    server = LocalServer(
        python=venv_python(venv),
        base_model=model_name,
        state_dir=_state_dir(config, run_dir),
        max_lora_rank=max(config.model.lora_rank, 8),
        start_timeout_s=service.start_timeout_s,
        tcmalloc=service.tcmalloc,
    )
    with console.status("starting the local SkyRL server"):  # a spinner on a terminal only
        server.start()
    watchdog = _Watchdog(server)
    try:
        allocator = str(server.allocator)
        if allocator != "tcmalloc":  # the engine runs, more slowly
            allocator += (
                " (service.tcmalloc=false)"
                if not service.tcmalloc
                else f" ({TCMALLOC} not found: apt-get install libtcmalloc-minimal4 for faster steps)"
            )
        say(
            f"local SkyRL server at {server.url} (started in {server.start_s:.1f} s; {allocator}; "
            f"log {server.log_path})"
        )
        with placeholder_api_key(override=True), SampleIdProxy(server.url, seed=config.seed) as proxy:
            watchdog.start()
            try:
                yield _resolved(config, proxy.url, model_name)
            except KeyboardInterrupt:
                if watchdog.died is None:
                    # Ctrl-C: stop the server at once, before the proxy (whose open
                    # long-polls to a live server would hold its shutdown for 10 s), with
                    # no graceful shutdown; what the server saved is already on disk.
                    watchdog.stop()
                    server.stop(grace_s=1.0)
                    raise
                raise ServiceUnavailableError(watchdog.died) from None
    finally:
        watchdog.stop()
        server.stop()


class _Watchdog:
    """Ends the run at once when the local server dies mid-run (the tinker SDK would
    otherwise retry for a long time): the main thread gets a KeyboardInterrupt, which
    `open_service` turns into a clear error with the server log's tail."""

    def __init__(self, server) -> None:
        import threading

        self.server = server
        self.died: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="piexp-server-watchdog", daemon=True)

    def _watch(self) -> None:
        import _thread

        process = self.server.process
        while not self._stop.wait(1.0):
            if process is not None and process.poll() is not None:
                self.died = (
                    f"The local SkyRL server exited during the run (exit {process.returncode}; "
                    "-9 is usually the kernel's out-of-memory killer). "
                    f"Log {self.server.log_path}: ...{self.server._log_tail(800)}"
                )
                _thread.interrupt_main()
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
