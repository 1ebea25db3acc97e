"""Tool specs are built once per WorkspaceTools class and handed out as copies."""

from __future__ import annotations

from tinker_cookbook.tool_use.tools import FunctionTool

from piexp.config.schema import LanguageSettings
from piexp.env.tools import WorkspaceTools
from piexp.tasks import Task

PYTHON = LanguageSettings(runtimes=["python", "python3"], filename="solution.py")
JAVASCRIPT = LanguageSettings(runtimes=["node"], filename="solution.js")
CUTS = {"stdout_chars": 512, "stderr_chars": 1200}  # a bash result's cuts (not part of a spec)


def _workspace(task_id: str, language: LanguageSettings) -> WorkspaceTools:
    task = Task(
        task_id=task_id, family="arith", split="train", instruction="Sum.", files={"n.txt": task_id}, answer="1"
    )
    return WorkspaceTools(task, language, "http://127.0.0.1:9/run_code", 10, language_name="python", **CUTS)


def test_specs_equal_to_spec_and_are_built_once(monkeypatch) -> None:
    class Tools(WorkspaceTools):  # a fresh class: a fresh cache entry
        pass

    calls = []
    original = FunctionTool.to_spec

    def counting(self):  # type: ignore[no-untyped-def]
        calls.append(self.name)
        return original(self)

    monkeypatch.setattr(FunctionTool, "to_spec", counting)
    first = Tools(
        _workspace("a", PYTHON).task, PYTHON, "http://127.0.0.1:9/run_code", 10, language_name="python", **CUTS
    )
    expected = [original(t) for t in first.all_tools()]
    assert first.tool_specs() == expected
    assert calls == ["read", "write", "edit", "bash"]
    other = Tools(
        _workspace("b", JAVASCRIPT).task,
        JAVASCRIPT,
        "http://127.0.0.1:9/run_code",
        5,
        language_name="javascript",
        **CUTS,
    )
    assert other.tool_specs() == expected and len(calls) == 4  # other task and language: cached


def test_specs_are_copies() -> None:
    workspace = _workspace("a", PYTHON)
    specs = workspace.tool_specs()
    specs[0]["parameters"]["properties"].clear()
    specs.append({"name": "extra"})
    assert workspace.tool_specs() == [t.to_spec() for t in workspace.all_tools()]
