"""Fixtures shared by the launch tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def bash_result_key_renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bash tool's result with `return_code` renamed `exit_code`: what a careless
    change to a tool's result format does (replay must report it at its first turn)."""
    from piexp.env.tools import WorkspaceTools

    original = WorkspaceTools._result

    def renamed(self, tool_name, **payload):
        if "return_code" in payload:
            payload["exit_code"] = payload.pop("return_code")
        return original(self, tool_name, **payload)

    monkeypatch.setattr(WorkspaceTools, "_result", renamed)
