"""Shared fixtures: one real embedded sandbox server for the whole test session."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Tests never reach a hub: tokenizers come from installed packages (piexp.tokenizer).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--durations-file",
        metavar="PATH",
        default=None,
        help="also write the slowest tests (as many as --durations asks, default 25) into PATH",
    )
    parser.addoption(
        "--cpu-file",
        metavar="PATH",
        default=None,
        help="write each test's CPU seconds (its setup, call and teardown, with the processes they waited for) into PATH",
    )


#: The slowest test file (minutes of one CPU-bound run): first of all, so that in a
#: parallel `make test` the other files fill the other workers beside it, not after it.
FIRST = "tests/service/test_learning.py"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first (the learning test before all), each group in collection order: a
    parallel run hands out whole files in this order, and a long file started last
    would leave the other workers idle at the end."""

    def rank(item: pytest.Item) -> int:
        if item.nodeid.startswith(FIRST):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)


def _cpu_s() -> float:
    """CPU seconds of this process, its waited-for children and the jobs it forked."""
    from tests.job_launcher import forked_jobs_cpu_s

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked_jobs_cpu_s()


_cpu_at_start: dict[str, float] = {}
_cpu_by_test: dict[str, float] = {}


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _cpu_at_start[nodeid] = _cpu_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test's CPU on its teardown report (a parallel run's worker sends it to the
    controller with the report): the CPU of the process running it, of the processes it
    waited for (a fresh job, a server it stopped, a module's cluster on the last test's
    teardown) and of the jobs it forked. Daemons nobody waits for are not counted."""
    outcome = yield
    if call.when == "teardown" and item.nodeid in _cpu_at_start:
        spent = _cpu_s() - _cpu_at_start.pop(item.nodeid)
        outcome.get_result().user_properties.append(("cpu_s", round(spent, 3)))  # type: ignore[attr-defined]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "cpu_s" and report.when == "teardown":
            _cpu_by_test[report.nodeid] = float(value)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """`--cpu-file`: each test's CPU, most first (bench/suite.py sums it per file).
    `--durations-file`: pytest's --durations table in a file (`make test` names it), so
    the slowest tests of a whole run can be read after the fact and the suite kept fast."""
    cpu_file = config.getoption("--cpu-file")
    if cpu_file:
        ranked = sorted(_cpu_by_test.items(), key=lambda item: -item[1])
        Path(cpu_file).write_text(
            "".join(f"{seconds:10.3f} {nodeid}\n" for nodeid, seconds in ranked), encoding="utf-8"
        )
    path = config.getoption("--durations-file")
    if not path:
        return
    count = config.getoption("durations") or 25
    reports = [
        report for reports in terminalreporter.stats.values() for report in reports if hasattr(report, "duration")
    ]
    reports.sort(key=lambda report: report.duration, reverse=True)
    lines = [f"slowest {min(count, len(reports))} durations (of {len(reports)} test phases; exit status {exitstatus})"]
    lines += [f"{report.duration:8.2f}s {report.when:<8} {report.nodeid}" for report in reports[:count]]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    terminalreporter.write_line(f"the slowest tests: {path}")


def _wait_until(what: str, predicate: Callable[[], Any], timeout: float = 15.0, every: float = 0.05) -> Any:
    """Poll `predicate` until it returns something true (returned) or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture(scope="session")
def wait_until() -> Callable[..., Any]:
    """`_wait_until` for test modules (fixtures rather than imports between test files)."""
    return _wait_until


@pytest.fixture(scope="session")
def sandbox_url() -> Iterator[str]:
    """The /run_code URL of a real, isolated embedded sandbox (bubblewrap)."""
    from piexp.sandbox.embedded import EmbeddedSandbox

    with EmbeddedSandbox() as sandbox:
        yield sandbox.url
