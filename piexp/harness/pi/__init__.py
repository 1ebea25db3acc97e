"""`harness=pi`: the Pi coding agent, installed into piexp's cache (install.py), run one
process per episode inside piexp's sandbox (sandbox.py), driven through a model endpoint
(piexp.harness.endpoint) and graded from its events (trace.py). The class is imported
lazily, so that `python -m piexp.harness.pi install` needs nothing but the standard library."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "PiHarness":
        from piexp.harness.pi.harness import PiHarness

        return PiHarness
    raise AttributeError(name)
