"""Every branch of the four workspace tools; `bash` runs in the real embedded sandbox."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from piexp.config.defaults import default_settings
from piexp.config.schema import LanguageSettings, RewardSettings
from piexp.env.tools import RESULT_SCHEMA, WorkspaceTools
from piexp.tasks import Task

PYTHON = LanguageSettings(runtimes=["python", "python3"], filename="solution.py")
JAVASCRIPT = LanguageSettings(runtimes=["node"], filename="solution.js")
REWARD = default_settings("reward", RewardSettings)
# The run's cuts of a bash result (conf/reward/), unless a test sets its own.
CUTS = {"stdout_chars": REWARD.stdout_chars, "stderr_chars": REWARD.stderr_chars}


def make_task() -> Task:
    return Task(
        task_id="t-1",
        family="arith",
        split="train",
        instruction="Sum numbers.txt.",
        files={"numbers.txt": "1\n2\n3\n", "data/extra.txt": "x"},
        answer="6",
    )


def workspace(
    language: LanguageSettings = PYTHON, url: str = "http://127.0.0.1:9/run_code", **kw: Any
) -> WorkspaceTools:
    name = "javascript" if language is JAVASCRIPT else "python"
    return WorkspaceTools(make_task(), language, url, 10, language_name=name, **{**CUTS, **kw})


def call(tool: Any, **arguments: Any) -> dict[str, Any]:
    from tinker_cookbook.tool_use import ToolInput

    result = asyncio.run(tool.run(ToolInput(arguments=arguments)))
    text = result.messages[0]["content"]
    payload = json.loads(text)
    assert payload["schema"] == RESULT_SCHEMA
    assert text == json.dumps(payload, sort_keys=True), "tool results are JSON with sorted keys"
    return payload


def test_read_ok_and_errors() -> None:
    ws = workspace()
    assert call(ws.read, path="numbers.txt") == {
        "schema": RESULT_SCHEMA,
        "tool": "read",
        "status": "ok",
        "path": "numbers.txt",
        "content": "1\n2\n3\n",
    }
    assert call(ws.read, path="./data/extra.txt")["path"] == "data/extra.txt"
    for bad in ["missing.txt", "/etc/passwd", "../numbers.txt", "data/../numbers.txt", "", "."]:
        assert call(ws.read, path=bad) == {
            "schema": RESULT_SCHEMA,
            "tool": "read",
            "status": "error",
            "error": "file not found",
        }, bad


def test_write_ok_and_denied_paths() -> None:
    ws = workspace()
    result = call(ws.write, path="solution.py", content="print('é')\n")
    assert result == {"schema": RESULT_SCHEMA, "tool": "write", "status": "ok", "path": "solution.py", "bytes": 12}
    assert ws.files["solution.py"] == "print('é')\n" and "solution.py" in ws.mutated
    for bad in ["/tmp/x.py", "../x.py", "a/../../x.py", "", "."]:
        assert call(ws.write, path=bad, content="x")["error"] == "path denied", bad
    assert set(ws.mutated) == {"solution.py"}


def test_edit_exactly_one_match() -> None:
    ws = workspace()
    call(ws.write, path="solution.py", content="a = 1\nb = 1\n")
    assert call(ws.edit, path="solution.py", oldText="a = 1", newText="a = 2")["status"] == "ok"
    assert ws.files["solution.py"] == "a = 2\nb = 1\n"
    assert call(ws.edit, path="solution.py", oldText=" = ", newText="=")["error"] == "oldText must match once"
    assert call(ws.edit, path="solution.py", oldText="zzz", newText="y")["error"] == "oldText must match once"
    assert call(ws.edit, path="solution.py", oldText="", newText="y")["error"] == "oldText must match once"
    assert call(ws.edit, path="nope.py", oldText="a", newText="b")["error"] == "file not found"
    assert call(ws.edit, path="../solution.py", oldText="a", newText="b")["error"] == "file not found"


def test_edit_of_a_provided_file_marks_it_mutated() -> None:
    ws = workspace()
    assert call(ws.edit, path="numbers.txt", oldText="3", newText="4")["status"] == "ok"
    assert ws.mutated == {"numbers.txt"}


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("python solution.py extra", "use python <relative-file>"),
        ("python", "use python <relative-file>"),
        ("node solution.py", "use python <relative-file>"),
        ("python solution.py; cat /etc/passwd", "use python <relative-file>"),
        ("python solution.py && ls", "use python <relative-file>"),
        ("python solution.py | cat", "use python <relative-file>"),
        ("bash -c 'python solution.py'", "use python <relative-file>"),
        ("python 'unterminated", "No closing quotation"),
        ("python missing.py", "program file not found"),
        ("python /tmp/solution.py", "program file not found"),
        ("python ../solution.py", "program file not found"),
        ("python numbers.txt", "program file was not created or edited"),
    ],
)
def test_bash_refusals(command: str, error: str) -> None:
    ws = workspace()
    call(ws.write, path="solution.py", content="print(6)\n")
    assert call(ws.bash, command=command) == {
        "schema": RESULT_SCHEMA,
        "tool": "bash",
        "status": "error",
        "error": error,
    }


def test_bash_unwritten_file_is_refused() -> None:
    ws = workspace()
    ws.files["solution.py"] = "print(6)\n"  # present, but not written in this episode
    assert call(ws.bash, command="python solution.py")["error"] == "program file was not created or edited"


def test_bash_runs_in_the_sandbox(sandbox_url: str) -> None:
    ws = workspace(url=sandbox_url)
    call(ws.write, path="solution.py", content="print(sum(int(x) for x in open('numbers.txt').read().split()))\n")
    result = call(ws.bash, command="python3 solution.py")
    assert result == {
        "schema": RESULT_SCHEMA,
        "tool": "bash",
        "status": "ok",
        "return_code": 0,
        "stdout": "6\n",
        "stderr": "",
        "output_correct": True,
    }


def test_bash_javascript_and_output_caps(sandbox_url: str) -> None:
    ws = workspace(JAVASCRIPT, url=sandbox_url, stdout_chars=5, stderr_chars=7)
    call(
        ws.write, path="solution.js", content="console.error('e'.repeat(50)); console.log('abcdefgh'); console.log(6)\n"
    )
    result = call(ws.bash, command="node solution.js")
    assert result["status"] == "ok" and result["output_correct"] is True
    assert result["stdout"] == "abcde" and result["stderr"] == "e" * 7


def test_bash_submission_error_and_wrong_output(sandbox_url: str) -> None:
    ws = workspace(url=sandbox_url)
    call(ws.write, path="solution.py", content="print(6)\nraise SystemExit(3)\n")
    failed = call(ws.bash, command="python solution.py")
    assert failed["status"] == "submission_error" and failed["return_code"] == 3
    assert failed["output_correct"] is False, "a non-zero exit never counts as correct output"
    call(ws.write, path="solution.py", content="print(6)\nprint(7)\n\n")
    wrong = call(ws.bash, command="python solution.py")
    assert wrong["status"] == "ok" and wrong["output_correct"] is False


def test_bash_time_out_is_a_submission_error(sandbox_url: str) -> None:
    ws = WorkspaceTools(make_task(), PYTHON, sandbox_url, 1, language_name="python", **CUTS)
    call(ws.write, path="solution.py", content="import time\ntime.sleep(30)\n")
    result = call(ws.bash, command="python solution.py")
    assert result["status"] == "submission_error" and result["return_code"] == -1


def test_bash_unreachable_sandbox_is_an_infrastructure_error() -> None:
    ws = workspace(url="http://127.0.0.1:9/run_code")  # port 9: nothing listens
    call(ws.write, path="solution.py", content="print(6)\n")
    result = call(ws.bash, command="python solution.py")
    assert result["status"] == "infrastructure_error" and result["error"]
