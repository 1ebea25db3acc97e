"""The four Pi-shaped workspace tools: read, write, edit, bash.

Each answers one JSON object (sorted keys) tagged with `RESULT_SCHEMA`; the reward reads
those objects back from the history, so their shape is the contract between tools and
reward.
"""

from __future__ import annotations

import copy
import json
import shlex
from typing import Annotated, Any, ClassVar

from tinker_cookbook.renderers.base import ToolSpec
from tinker_cookbook.tool_use import ToolResult, simple_tool_result, tool

from piexp.config.schema import LanguageSettings
from piexp.env.paths import normalize_workspace_path
from piexp.sandbox.client import sandbox_client
from piexp.tasks import Task

RESULT_SCHEMA = "machine.pi-workspace-tool.v1"


def last_nonempty_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class WorkspaceTools:
    """One episode's workspace: the task's files plus what the model writes."""

    def __init__(
        self,
        task: Task,
        language: LanguageSettings,
        sandbox_url: str,
        timeout_s: int,
        *,
        language_name: str,
        stdout_chars: int,
        stderr_chars: int,
        memory_limit_mb: int | None = None,
    ) -> None:
        self.task = task
        self.language = language
        self.language_name = language_name  # registry name: the sandbox runs it by its protocol id
        self.files: dict[str, str] = dict(task.files)
        self.mutated: set[str] = set()
        self.sandbox_url = sandbox_url
        self.timeout_s = timeout_s
        self.stdout_chars = stdout_chars
        self.stderr_chars = stderr_chars
        self.memory_limit_mb = memory_limit_mb
        # Why the sandbox could not run a program in this episode (None: it always could).
        self.infrastructure_failure: str | None = None

    # Tool specs by (class, tool names); see tool_specs().
    _spec_cache: ClassVar[dict[tuple[type, tuple[str, ...]], list[ToolSpec]]] = {}

    def all_tools(self) -> list[Any]:
        return [self.read, self.write, self.edit, self.bash]

    def tool_specs(self, tools: list[Any] | None = None) -> list[ToolSpec]:
        """The renderer specs of `tools` (default: all_tools()), as `to_spec()` gives them.

        A spec is built from the tool's signature and docstring only (never the task,
        language or files), and building its JSON schema through pydantic costs about
        a millisecond per episode, so it is built once per class and copied out.
        """
        tools = self.all_tools() if tools is None else tools
        key = (type(self), tuple(t.name for t in tools))
        specs = self._spec_cache.get(key)
        if specs is None:
            specs = self._spec_cache[key] = [t.to_spec() for t in tools]
        return copy.deepcopy(specs)

    def _result(self, tool_name: str, **payload: Any) -> ToolResult:
        return simple_tool_result(json.dumps({"schema": RESULT_SCHEMA, "tool": tool_name, **payload}, sort_keys=True))

    @tool
    async def read(self, path: Annotated[str, "Workspace-relative file path."]) -> ToolResult:
        """Read a UTF-8 text file from the assigned workspace."""
        normalized = normalize_workspace_path(path)
        if normalized is None or normalized not in self.files:
            return self._result("read", status="error", error="file not found")
        return self._result("read", status="ok", path=normalized, content=self.files[normalized])

    @tool
    async def write(
        self,
        path: Annotated[str, "Workspace-relative destination path."],
        content: Annotated[str, "Complete UTF-8 file content."],
    ) -> ToolResult:
        """Create or overwrite a UTF-8 text file in the assigned workspace."""
        normalized = normalize_workspace_path(path)
        if normalized is None:
            return self._result("write", status="error", error="path denied")
        self.files[normalized] = content
        self.mutated.add(normalized)
        return self._result("write", status="ok", path=normalized, bytes=len(content.encode()))

    @tool
    async def edit(
        self,
        path: Annotated[str, "Workspace-relative file path."],
        oldText: Annotated[str, "Exact text to replace."],  # noqa: N803 - Pi's argument name
        newText: Annotated[str, "Replacement text."],  # noqa: N803
    ) -> ToolResult:
        """Replace one exact text occurrence in a workspace file."""
        normalized = normalize_workspace_path(path)
        if normalized is None or normalized not in self.files:
            return self._result("edit", status="error", error="file not found")
        if not oldText or self.files[normalized].count(oldText) != 1:
            return self._result("edit", status="error", error="oldText must match once")
        self.files[normalized] = self.files[normalized].replace(oldText, newText, 1)
        self.mutated.add(normalized)
        return self._result("edit", status="ok", path=normalized)

    @tool
    async def bash(
        self,
        command: Annotated[str, "One assigned-runtime command using a relative file path."],
    ) -> ToolResult:
        """Execute one program file with the assigned runtime in an isolated sandbox."""
        try:
            argv = shlex.split(command)
        except ValueError as error:
            return self._result("bash", status="error", error=str(error))
        if len(argv) != 2 or argv[0] not in self.language.runtimes:
            return self._result("bash", status="error", error=f"use {self.language.runtimes[0]} <relative-file>")
        path = normalize_workspace_path(argv[1])
        if path is None or path not in self.files:
            return self._result("bash", status="error", error="program file not found")
        if path not in self.mutated:
            return self._result("bash", status="error", error="program file was not created or edited")
        client = sandbox_client(self.sandbox_url)
        _transport_success, response = await client.run(
            code=self.files[path],
            files={name: content for name, content in self.files.items() if name != path},
            timeout=self.timeout_s,
            language=self.language_name,
            memory_limit_mb=self.memory_limit_mb,
        )
        run_result = response.get("run_result")
        if response.get("status") == "SandboxError" or not isinstance(run_result, dict):
            failure = str(response.get("error") or response.get("message") or response)[:1000]
            self.infrastructure_failure = failure
            return self._result("bash", status="infrastructure_error", error=failure)
        stdout = str(run_result.get("stdout") or "")
        raw_code = run_result.get("return_code")
        # A run that hit the time-out has no return code; it is the submission's failure.
        return_code = int(raw_code) if raw_code is not None else -1
        output_correct = return_code == 0 and last_nonempty_line(stdout) == self.task.answer
        return self._result(
            "bash",
            status="ok" if return_code == 0 else "submission_error",
            return_code=return_code,
            stdout=stdout[: self.stdout_chars],
            stderr=str(run_result.get("stderr") or "")[: self.stderr_chars],
            output_correct=output_correct,
        )
