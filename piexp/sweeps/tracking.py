"""Run one job with resume, live status and failure isolation.

`run_tracked` wraps `run_mode` for every job, single run or multirun:

1. If the job folder holds a completed marker for the same resolved config, the job is
   skipped (logged, status `skipped`) and the marker's metric is returned.
2. Otherwise the job is claimed in the status table (`running`, with this process's
   host, pid and start time; a job another live process still runs, e.g. one that
   outlived a killed launcher, is waited for instead of run twice), any stale marker
   is removed (a rerun that dies half-way must not look finished), the mode runs while
   a thread refreshes the heartbeat, and the marker is written last, after every result
   file. A sweep's table is `<sweep dir>/sweep_status.*`; a single run's is
   `<run>/.piexp/sweep_status.*`.
3. In a multirun a failure is recorded (`failed`, with the error) and printed on stderr
   the moment it happens, then raised as `SweepJobFailed`, which Hydra stores in the
   job's result instead of letting it escape the worker: the other jobs keep running,
   and after the sweep Hydra raises it, printing one line and exiting 1.

`PIEXP_SWEEP_FAIL_JOBS` (a comma list of Hydra job numbers) makes those jobs fail after
their run finished but before the marker is written: the state an interrupted job leaves.
It exists for the resume tests and for trying out a sweep's failure handling.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.errors import CompactHydraException

from piexp.run_folder import RunFolder
from piexp.config.schema import RunConfig
from piexp.errors import UserError
from piexp.sweeps.liveness import HEARTBEAT_EVERY_S, Owner
from piexp.sweeps.marker import MARKER_PATH, clear_marker, config_hash, write_marker
from piexp.sweeps.status import SweepStatus

log = logging.getLogger("piexp.sweeps")

FAIL_JOBS_ENV = "PIEXP_SWEEP_FAIL_JOBS"
# A single run's status table lives next to its completed marker, in `<run>/.piexp/`.
STATUS_SUBDIR = MARKER_PATH.parent
# Seconds between two looks at a job another live process runs.
WAIT_POLL_S = 2.0


class SweepJobFailed(CompactHydraException):
    """A multirun job failed. Compact: Hydra prints only this message at the end of the
    sweep (the traceback was already printed by the job when it failed)."""


@dataclass(frozen=True)
class JobInfo:
    """Where a job sits: its number and overrides, and the sweep folder (multirun only)."""

    num: int
    overrides: list[str] = field(default_factory=list)
    sweep_dir: Path | None = None

    @property
    def multirun(self) -> bool:
        return self.sweep_dir is not None

    @classmethod
    def from_hydra(cls) -> JobInfo:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
        multirun = hydra_cfg.mode == RunMode.MULTIRUN
        num = getattr(hydra_cfg.job, "num", 0) if multirun else 0
        return cls(
            num=int(num if num is not None else 0),
            overrides=list(hydra_cfg.overrides.task),
            sweep_dir=Path(hydra_cfg.sweep.dir) if multirun else None,
        )


def _injected_failure(job: JobInfo) -> None:
    wanted = {item.strip() for item in os.environ.get(FAIL_JOBS_ENV, "").split(",") if item.strip()}
    if job.multirun and str(job.num) in wanted:
        raise RuntimeError(f"injected failure ({FAIL_JOBS_ENV} includes job {job.num})")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _error_text(error: BaseException) -> str:
    """What `status` shows of a failure: its message, and what it was when the message alone
    says nothing (a SystemExit's bare status, an exception without text or with a number)."""
    if isinstance(error, SystemExit):
        return f"the job exited with status {error.code} before it finished"
    text = " ".join(str(error).split())
    if not text or text.lstrip("-").isdigit():
        return f"{type(error).__name__}{f' {text}' if text else ''} (an error without a message)"
    return text


def _label(job: JobInfo) -> str:
    overrides = " ".join(job.overrides) or "no overrides"
    return f"job {job.num} ({overrides})" if job.multirun else f"run ({overrides})"


def job_failed(job: JobInfo, run_dir: Path, error: BaseException, *, recorded: bool = False) -> SweepJobFailed:
    """Record (unless already done) and report a multirun job's failure now, and return
    the compact exception for Hydra to hold until the sweep ends."""
    assert job.sweep_dir is not None
    status = SweepStatus(job.sweep_dir)
    text = _error_text(error)
    if not recorded:
        status.update(job.num, state="failed", error=text, overrides=job.overrides, dir=str(run_dir))
    # Reported now, not at the end of the sweep: a failed job must not hide.
    print(
        f"piexp: sweep {_label(job)} FAILED: {text} (folder {run_dir}; status in {status.md_path})",
        file=sys.stderr,
        flush=True,
    )
    if not isinstance(error, UserError):
        log.error("%s failed", _label(job), exc_info=error)
    return SweepJobFailed(
        f"Sweep {_label(job)} failed: {text.rstrip('.')}. Every job's state is in {status.md_path}; run the "
        "same command with the same hydra.sweep.dir=... to rerun only the jobs that did not complete."
    )


@contextmanager
def _heartbeat(status: SweepStatus, job: JobInfo, owner: Owner) -> Iterator[None]:
    """Refresh the job's heartbeat every HEARTBEAT_EVERY_S from a daemon thread while the
    job runs (a thread, not the job's own loop: a mode busy in one long call still beats)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_EVERY_S):
            try:
                if not status.heartbeat(job.num, owner):
                    log.warning("%s: the status entry is no longer this process's; heartbeat stopped", _label(job))
                    return
            except OSError as error:  # a shared file system's hiccup: try again next beat
                log.warning("%s: heartbeat not written (%s)", _label(job), error)

    thread = threading.Thread(target=beat, name="piexp-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _claim(
    status: SweepStatus, run_dir: Path, job: JobInfo, digest: str, owner: Owner, common: dict[str, Any]
) -> dict[str, Any] | None:
    """Take the job over for this process; return the completed marker instead when the
    job is (or meanwhile became) complete. While another live process runs the same job
    (an earlier launch whose jobs outlived its launcher), wait for it to end rather than
    run it twice into one folder."""
    announced = False
    while True:
        marker = RunFolder(run_dir).completion()
        if marker is not None and marker["config_hash"] == digest:
            return marker
        busy = status.claim(job.num, owner, **common)
        if busy is None:
            if marker is not None:
                # The folder guard let the job in, so the config differs only where a rerun
                # continues the same run (a larger mode.max_steps, a reproduces record).
                log.info(
                    "Continuing %s in %s: its completed marker is for an earlier config of the same run.",
                    _label(job),
                    run_dir,
                )
            return None
        if not announced:
            log.info(
                "Waiting for %s: pid %s on %s runs it already (heartbeat %s); it is resumed or skipped "
                "when that process ends.",
                _label(job),
                busy.get("pid"),
                busy.get("host"),
                busy.get("heartbeat_utc"),
            )
            announced = True
        time.sleep(WAIT_POLL_S)


def run_tracked(
    config: RunConfig,
    run_dir: Path,
    job: JobInfo,
    run: Callable[[RunConfig, Path], float | None],
) -> float | None:
    digest = config_hash(config)
    # A sweep's jobs share the sweep folder's table; a single run keeps its own in its folder.
    status = SweepStatus(job.sweep_dir if job.sweep_dir is not None else Path(run_dir) / STATUS_SUBDIR)
    label = _label(job)
    common = {"overrides": job.overrides, "dir": str(run_dir), "config_hash": digest}
    owner = Owner.current()

    marker = _claim(status, run_dir, job, digest, owner, common)
    if marker is not None:
        log.info("Skipping %s: %s holds a completed marker for the same config.", label, run_dir)
        status.update(job.num, state="skipped", metric=marker.get("metric"), **common)
        return marker.get("metric")
    clear_marker(run_dir)

    try:
        with _heartbeat(status, job, owner):
            metric = run(config, run_dir)
            _injected_failure(job)
    except BaseException as error:
        # Ctrl-C stays an interruption (re-raised as it is); SystemExit(non-zero) from deep
        # inside a mode is a failure like any exception.
        interrupted = not isinstance(error, Exception) and not (
            isinstance(error, SystemExit) and error.code not in (None, 0)
        )
        status.update(
            job.num,
            state="interrupted" if interrupted else "failed",
            error=_error_text(error),
            finished_utc=_now(),
            **common,
        )
        if not job.multirun or interrupted:
            raise
        raise job_failed(job, run_dir, error, recorded=True) from None
    write_marker(run_dir, digest, metric=metric, overrides=job.overrides)
    status.update(job.num, state="complete", metric=metric, finished_utc=_now(), **common)
    return metric
