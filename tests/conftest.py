"""Shared fixtures: one real embedded sandbox server for the whole test session."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# Tests never reach a hub: tokenizers come from installed packages (piexp.tokenizer).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


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
