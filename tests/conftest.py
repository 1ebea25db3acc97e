"""Shared fixtures: one real embedded sandbox server for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Tests never reach a hub: tokenizers come from installed packages (piexp.tokenizer).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def sandbox_url() -> Iterator[str]:
    """The /run_code URL of a real, isolated embedded sandbox (bubblewrap)."""
    from piexp.sandbox.embedded import EmbeddedSandbox

    with EmbeddedSandbox() as sandbox:
        yield sandbox.url
