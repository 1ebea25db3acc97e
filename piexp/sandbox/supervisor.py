"""Keep an embedded sandbox server alive for a run: a watcher thread restarts a server that
died (its exit status or signal is the cause) or stopped answering its health check, on
the same port, so clients need no new URL and requests made meanwhile wait for the new
server. Restarts are bounded (a count within a window); past the bound, or when a restart
fails, the URL is marked down (`piexp.sandbox.availability`) and the run stops instead of
scoring programs that cannot run."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .availability import answers_ping, mark_down, mark_up, note_restart
from .embedded import EmbeddedSandbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestartPolicy:
    """How the supervisor watches and how often it may restart."""

    max_restarts: int = 3  # restarts allowed within window_s; one more failure marks the sandbox down
    window_s: float = 600.0  # the window the restarts are counted in
    health_interval_s: float = 1.0  # seconds between two looks at the server
    health_timeout_s: float = 30.0  # a live server that answers no ping for this long is restarted


def exit_cause(returncode: int) -> str:
    """`Popen.returncode` in words: "killed by SIGKILL", "exited with status 1"."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class SupervisedSandbox:
    """An `EmbeddedSandbox` and the thread that keeps it running (context manager).
    `report` receives one line per restart and the line that gives up."""

    def __init__(
        self,
        sandbox: EmbeddedSandbox,
        policy: RestartPolicy = RestartPolicy(),
        report: Callable[[str], None] = log.warning,
    ) -> None:
        self.sandbox = sandbox
        self.policy = policy
        self.report = report
        self.restarts = 0
        self._restart_times: deque[float] = deque()
        self._stopping = threading.Event()
        # Held while the server is restarted or stopped, so that the two never overlap.
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.sandbox.url

    def start(self) -> SupervisedSandbox:
        # A server that dies before it first answers (killed, or crashed while starting)
        # is started again within the restart bound, as a later death would be.
        while True:
            try:
                self.sandbox.start()
                break
            except RuntimeError as error:
                if not self._count_restart():
                    raise
                self.report(
                    f"sandbox: {error}; starting it again (restart {len(self._restart_times)} of at most "
                    f"{self.policy.max_restarts} within {self.policy.window_s:g} s)"
                )
        mark_up(self.url)  # a URL marked down by an earlier server on this port
        self._thread = threading.Thread(target=self._watch, name="piexp-sandbox-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching and stop the server at once: a health check in flight is not
        waited for (the watcher sees `_stopping` when it returns and ends)."""
        self._stopping.set()
        with self._lock:
            self.sandbox.stop()
        self._thread = None

    def __enter__(self) -> SupervisedSandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _watch(self) -> None:
        # Restarted servers are started from this thread: it lives until stop() (see
        # EmbeddedSandbox on the parent-death signal).
        last_answer = time.monotonic()
        while not self._stopping.wait(self.policy.health_interval_s):
            proc = self.sandbox.proc
            if proc is None:
                return
            code = proc.poll()
            if code is not None:
                cause = f"the embedded sandbox server {exit_cause(code)}"
            elif answers_ping(self.url, timeout_s=min(5.0, self.policy.health_timeout_s)):
                last_answer = time.monotonic()
                continue
            elif time.monotonic() - last_answer < self.policy.health_timeout_s or self._stopping.is_set():
                continue
            else:
                cause = f"the embedded sandbox server answered no health check for {self.policy.health_timeout_s:g} s"
            if not self._restart(cause):
                return
            last_answer = time.monotonic()

    def _restart(self, cause: str) -> bool:
        """Restart within the bound (a restart whose server dies before answering counts
        as one, and the next is tried); False when the bound is reached."""
        with self._lock:
            return self._restart_within_bound(cause)

    def _count_restart(self) -> bool:
        """Count one more restart, or say (False) that the bound is reached."""
        now = time.monotonic()
        while self._restart_times and now - self._restart_times[0] > self.policy.window_s:
            self._restart_times.popleft()
        if len(self._restart_times) >= self.policy.max_restarts:
            return False
        self._restart_times.append(now)
        self.restarts += 1
        return True

    def _restart_within_bound(self, cause: str) -> bool:
        while not self._stopping.is_set():
            if not self._count_restart():
                self._give_up(
                    f"is down: {cause}, after {len(self._restart_times)} restarts within "
                    f"{self.policy.window_s:g} s (sandbox.max_restarts={self.policy.max_restarts})"
                )
                return False
            try:
                self.sandbox.restart()
            except Exception as error:  # noqa: BLE001 - the next restart is tried, within the bound
                cause = f"{cause}, and its restart failed ({error})"
                continue
            note_restart(self.url)
            self.report(
                f"sandbox: {cause}; restarted it on port {self.sandbox.port} "
                f"(restart {len(self._restart_times)} of at most {self.policy.max_restarts} "
                f"within {self.policy.window_s:g} s); runs in flight are retried"
            )
            return True
        return False

    def _give_up(self, reason: str) -> None:
        mark_down(self.url, reason)
        self.report(f"sandbox: the sandbox at {self.url} {reason}; the run stops")
        # Stop the server (if any) and free the port: waiting clients fail at once.
        self.sandbox.stop()
