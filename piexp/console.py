"""What piexp shows a person while it works: one stderr console for every command, a
plain-text copy of everything it says and logs in the run folder's `job.log` (no colour,
no live updates; opened only once the run-folder guard has passed), and progress that
is a live bar on a terminal and a plain line every `PLAIN_PROGRESS_EVERY_S` seconds
elsewhere (CI, nohup, a sweep job's log), with a count and an estimate of the time left."""

from __future__ import annotations

import io
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# Without a terminal (CI, nohup, a sweep job's log) rich would assume 80 columns and wrap
# every longer line in two; such output is read in a log viewer, so lines stay whole up to
# this width (COLUMNS, when set, still decides).
NON_TERMINAL_WIDTH = 200


def _stderr_console() -> Console:
    terminal = Console(stderr=True)
    if terminal.is_terminal or "COLUMNS" in os.environ:
        return terminal
    return Console(stderr=True, width=NON_TERMINAL_WIDTH)


console = _stderr_console()
PLAIN_PROGRESS_EVERY_S = 10.0  # a progress line this often without a terminal, and in job.log
_JOB_LOG_WIDTH = 120
# Which sweep job is speaking ("job 3"): the jobs of a sweep print into one stream, where
# their tables would otherwise be told apart by nothing. None outside a sweep.
_job_label: Optional[str] = None

_job_log: Optional[Path] = None
# An ANSI escape sequence (colour, style, cursor): what a third party's rich console or
# coloured log format writes on a terminal, and never into a log file.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    """`text` without ANSI escape sequences."""
    return _ANSI.sub("", text)


class PlainFormatter(logging.Formatter):
    """A log file's formatter: `inner`'s lines (the console's format) without ANSI codes."""

    def __init__(self, inner: Optional[logging.Formatter] = None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter("%(name)s:%(lineno)d [%(levelname)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return plain(self.inner.format(record))


def add_log_file(path: Path) -> logging.Handler:
    """Write every log record, as plain text, into `path` too (a third party's own log file,
    such as tinker-cookbook's logs.log); remove it with `remove_log_file`."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(PlainFormatter())
    logging.getLogger().addHandler(handler)
    return handler


def remove_log_file(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()


# The root logger's handler writing log records into the job.log (Hydra's own file
# handler is off: it would open the file before the folder is checked).
_job_log_records: Optional[logging.FileHandler] = None


def attach_job_log(path: Path) -> None:
    """Copy what `say` and progress print, and every log record, into `path` (the run's
    job.log) from now on."""
    global _job_log, _job_log_records
    detach_job_log()
    _job_log = Path(path)
    root = logging.getLogger()
    _job_log_records = logging.FileHandler(_job_log, encoding="utf-8")
    # Log lines in job.log look like those on the console (the format Hydra configured).
    _job_log_records.setFormatter(PlainFormatter(next((h.formatter for h in root.handlers if h.formatter), None)))
    root.addHandler(_job_log_records)


def set_job_label(label: Optional[str]) -> None:
    """Name the sweep job whose tables `say` prints from now on (None: not a sweep job)."""
    global _job_label
    _job_label = label


def _cells(title: Any) -> int:
    if isinstance(title, Text):
        return title.cell_len
    return Text.from_markup(title).cell_len if isinstance(title, str) else 0


def _labelled(table: Table) -> Table:
    """The table with the sweep job's label in its title, and at least as wide as its title
    and caption: rich wraps those to the table's width (a two-column table's caption came
    out in 17-character lines)."""
    if _job_label is not None:
        table.title = f"{_job_label}: {table.title}" if table.title else _job_label
    table.min_width = max(table.min_width or 0, _cells(table.title), _cells(table.caption))
    return table


def detach_job_log() -> None:
    """Stop copying into the job.log (a later job of the same process has its own)."""
    global _job_log, _job_log_records
    _job_log = None
    if _job_log_records is not None:
        logging.getLogger().removeHandler(_job_log_records)
        _job_log_records.close()
        _job_log_records = None


def _to_job_log(*objects: Any, **kwargs: Any) -> None:
    if _job_log is None:
        return
    buffer = io.StringIO()
    objects = tuple(plain(item) if isinstance(item, str) else item for item in objects)
    Console(file=buffer, width=_JOB_LOG_WIDTH, no_color=True, force_terminal=False, highlight=False).print(
        *objects, **kwargs
    )
    try:
        with _job_log.open("a", encoding="utf-8") as log:
            log.write(buffer.getvalue())
    except OSError:
        pass  # a log that cannot be written never stops the run


class _OutlivesItsReader:
    """A standard stream (stdout or stderr) that a run outlives: once its reader has gone
    (`... | head`, a pager closed), writing to it no longer fails. Its file descriptor then
    leads to /dev/null (for every writer in the process and the children it starts later),
    the run goes on with its console quiet, and why is said once, on the other stream
    while that one is open, and in the run's job.log. Without this, rich's console ends
    the process with exit 1 at the first line it cannot write, and the run is lost."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self.name = name
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._went()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._went()

    def _went(self) -> None:
        self.gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass  # a stream without a descriptor: its writes are dropped here all the same
        note = (
            f"piexp: {self.name} was closed by its reader at {time.strftime('%H:%M:%S')} (a pipe into head or a "
            "pager): the run goes on with its console quiet and writes everything into its folder"
            + (f" (this log: {_job_log})" if _job_log is not None else "")
            + "."
        )
        for other in _surviving.values():
            if other is not self and not other.gone:
                other.write(note + "\n")
                other.flush()
        _to_job_log(note)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# The process's stdout and stderr once `outlive_closed_streams` has wrapped them.
_surviving: dict[str, _OutlivesItsReader] = {}


def quiet_third_party_deprecations() -> None:
    """The tinker SDK marks calls tinker-cookbook 0.5.8 makes (saving checkpoints, sampling
    through a SamplingClient's future) as deprecated: FutureWarnings raised from their
    code at every save and sampling call, which the user can do nothing about. Filtered
    by the module that raises them, so a warning from piexp's own calls still shows (and
    fails the tests that look for it)."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"tinker(_cookbook)?(\.|$)")


def third_party_warnings_to_job_log() -> None:
    """A warning raised from another package's code (torch, matplotlib, the cookbook) goes
    into the run's job.log only: the user can do nothing about it, and on the console it
    would break the run's lines. piexp's own warnings still show on the console."""
    import warnings

    if getattr(warnings.showwarning, "piexp_routed", False):
        return
    shown = warnings.showwarning
    own = os.path.dirname(os.path.abspath(__file__)) + os.sep

    def showwarning(
        message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if os.path.abspath(filename).startswith(own):
            shown(message, category, filename, lineno, file, line)
        else:
            _to_job_log(warnings.formatwarning(message, category, filename, lineno, line).rstrip(), markup=False)

    showwarning.piexp_routed = True  # type: ignore[attr-defined]
    warnings.showwarning = showwarning


def outlive_closed_streams() -> None:
    """From now on a closed stdout or stderr never stops this process (see
    `_OutlivesItsReader`): for a run, a sweep job or any command that does work. Log
    handlers already writing to either stream write through the wrapper too. Idempotent."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _OutlivesItsReader) or stream is None:
            continue
        wrapped = _surviving[name] = _OutlivesItsReader(stream, name)
        setattr(sys, name, wrapped)
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is stream:
                handler.setStream(wrapped)


def to_job_log(*objects: Any, **kwargs: Any) -> None:
    """Write into the run's job.log only (what the console shows shorter)."""
    _to_job_log(*objects, **kwargs)


def say(*objects: Any, **kwargs: Any) -> None:
    """Print to the console and into the run's job.log (a table labelled with its sweep job).
    A line of text is never wrapped (a path cut in two cannot be copied or searched for);
    a table keeps to the console's width."""
    objects = tuple(_labelled(item) if isinstance(item, Table) else item for item in objects)
    if all(isinstance(item, str) for item in objects):
        kwargs.setdefault("soft_wrap", True)
    console.print(*objects, **kwargs)
    _to_job_log(*objects, **kwargs)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class ProgressReport:
    """Progress of `total` items called `label`: a transient rich bar on a terminal (with
    `live`); otherwise (and always in job.log) `label: done/total (pct), elapsed, ~left
    left` every PLAIN_PROGRESS_EVERY_S seconds, whether or not an item finished meanwhile
    (a log that says nothing for minutes reads as a hung run), and once at the end."""

    def __init__(self, label: str, total: int, unit: str = "episodes", *, live: bool = True) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self.note = ""
        self.live = live
        self._start = self._last_line = time.monotonic()
        self._bar: Optional[Progress] = None
        self._task: Optional[TaskID] = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._clock: Optional[threading.Thread] = None

    def _tick(self) -> None:
        while not self._stopped.wait(1.0):
            with self._lock:
                due = time.monotonic() - self._last_line >= PLAIN_PROGRESS_EVERY_S
                if due:
                    self._last_line = time.monotonic()
            if due:
                self._line()

    def __enter__(self) -> "ProgressReport":
        self._clock = threading.Thread(target=self._tick, name=f"progress {self.label}", daemon=True)
        self._clock.start()
        if self.live and console.is_terminal:
            self._bar = Progress(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[note]}"),
                console=console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.unit, total=self.total, note="")
        return self

    def advance(self, n: int = 1, note: str = "") -> None:
        self.reach(self.done + n, note)

    def reach(self, done: int, note: str = "") -> None:
        """`done` items finished in all (a resumed run starts past zero)."""
        n, self.done, self.note = done - self.done, done, note
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=n, note=note)
        with self._lock:
            due = time.monotonic() - self._last_line >= PLAIN_PROGRESS_EVERY_S
            if due:
                self._last_line = time.monotonic()
        if due:
            self._line()

    def line(self) -> str:
        elapsed = time.monotonic() - self._start
        share = self.done / self.total if self.total else 1.0
        left = (
            f", ~{_duration(elapsed / self.done * (self.total - self.done))} left" if 0 < self.done < self.total else ""
        )
        return (
            f"{self.label}: {self.done}/{self.total} {self.unit} ({share:.0%}), {_duration(elapsed)} elapsed"
            f"{left}{f' ({self.note})' if self.note else ''}"
        )

    def _line(self) -> None:
        text = self.line()
        if self._bar is None:
            console.print(text, highlight=False)
        _to_job_log(text)

    def __exit__(self, *exc: Any) -> None:
        self._stopped.set()
        if self._clock is not None:
            self._clock.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)
        self._line()
