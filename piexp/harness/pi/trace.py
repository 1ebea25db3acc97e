"""What Pi did, read back from its `--mode json` events, and the episode's reward graded
from it with the reference environment's four steps and metric names (piexp.env.reward):

- mutation: a `write` or `edit` call that succeeded (`isError` false);
- execution: a `bash` call whose command is exactly the assigned program run with an
  assigned runtime (`shlex.split(command) == [runtime, path]`, the runtime one of the
  language's `runtimes`, e.g. `python` or `python3` for Python, `node` for JavaScript,
  and the path naming the assigned file, `solution.py`, `./solution.py`), that exited 0;
  any other command (`cd . && python solution.py`, `python solution.py | tail -1`,
  `python3 -c ...`) runs, but counts for no step;
- output: such a run whose last non-empty line of output is the answer (Pi's bash tool
  gives stdout and stderr as one stream, so a program that writes to stderr after its
  answer does not count);
- answer: the last integer of Pi's last assistant message.

Shaped and binary rewards combine them exactly as `WorkspaceReward` does.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from piexp.config.schema import LanguageSettings, RewardWeights
from piexp.env.paths import normalize_workspace_path
from piexp.env.reward import final_answer
from piexp.env.tools import last_nonempty_line


@dataclass
class ToolRun:
    """One tool call Pi executed and its result."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    text: str = ""  # the result as the model saw it
    is_error: bool = False
    exit_code: int | None = None  # bash only
    output: str | None = None  # bash only: the command's output (stdout and stderr together)
    ended: bool = False  # Pi reported the call's end


@dataclass
class PiTrace:
    """An episode's events: the tool runs, the assistant messages, whether Pi ended its
    run (`agent_end`), and the messages of its conversation (agent_end's, or the events')."""

    tool_runs: list[ToolRun] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False
    stop_reason: str | None = None  # Pi's last assistant stopReason (stop, toolUse, error, ...)
    error_message: str | None = None  # Pi's own error on its last assistant message
    malformed_lines: int = 0

    @property
    def running_tool(self) -> ToolRun | None:
        """A tool call Pi started and had not finished when its events end."""
        return next((r for r in reversed(self.tool_runs) if not r.ended), None)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def parse_events(stdout: bytes) -> PiTrace:
    trace = PiTrace()
    runs: dict[str, ToolRun] = {}
    for line in stdout.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            trace.malformed_lines += 1
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "tool_execution_start":
            call_id = str(event.get("toolCallId"))
            args = event.get("args")
            runs[call_id] = ToolRun(call_id, str(event.get("toolName")), args if isinstance(args, dict) else {})
            trace.tool_runs.append(runs[call_id])
        elif kind == "tool_execution_end":
            call_id = str(event.get("toolCallId"))
            run = runs.get(call_id)
            if run is None:
                run = runs[call_id] = ToolRun(call_id, str(event.get("toolName")), {})
                trace.tool_runs.append(run)
            result: dict[str, Any] = event["result"] if isinstance(event.get("result"), dict) else {}
            run.ended = True
            run.text = _text(result.get("content"))
            run.is_error = bool(event.get("isError"))
            structured = result.get("structuredContent")
            if run.tool == "bash" and isinstance(structured, dict):
                code = structured.get("exit_code")
                run.exit_code = int(code) if isinstance(code, int) else None
                run.output = str(structured.get("output") or "")
        elif kind == "message_end":
            message: dict[str, Any] = event["message"] if isinstance(event.get("message"), dict) else {}
            if message.get("role") == "assistant":
                trace.assistant_texts.append(_text(message.get("content")))
                trace.stop_reason = message.get("stopReason")
                trace.error_message = message.get("errorMessage")
            if message.get("role") in ("user", "assistant", "toolResult"):
                trace.messages.append(message)
        elif kind == "agent_end":
            trace.ended = True
    return trace


def counted_run(run: ToolRun, language: LanguageSettings) -> bool:
    """Whether a bash call is the assigned program run with an assigned runtime."""
    if run.tool != "bash":
        return False
    try:
        argv = shlex.split(str(run.arguments.get("command", "")))
    except ValueError:
        return False
    return len(argv) == 2 and argv[0] in language.runtimes and normalize_workspace_path(argv[1]) == language.filename


def grade(
    trace: PiTrace, answer: str, language: LanguageSettings, weights: RewardWeights, *, binary: bool
) -> tuple[float, dict[str, float]]:
    """(reward, metrics) of an episode, by the rules of the module docstring."""
    mutation = any(r.tool in ("write", "edit") and not r.is_error for r in trace.tool_runs)
    counted = [r for r in trace.tool_runs if counted_run(r, language) and r.exit_code == 0]
    executed = bool(counted)
    output_correct = any(last_nonempty_line(r.output or "") == answer for r in counted)
    stated = (
        final_answer([{"role": "assistant", "content": trace.assistant_texts[-1]}]) if trace.assistant_texts else None
    )
    final_correct = stated == answer
    fully = mutation and executed and output_correct and final_correct
    if binary or fully:
        reward = float(fully)
    else:
        reward = (
            weights.mutation * mutation
            + weights.execution * executed
            + weights.output * output_correct
            + weights.answer * final_correct
        )
    return reward, {
        "tool_called": float(bool(trace.tool_runs)),
        "mutation_succeeded": float(mutation),
        "execution_succeeded": float(executed),
        "execution_output_correct": float(output_correct),
        "response_answer_correct": float(final_correct),
        "functional_correct": float(fully),
        "infrastructure_error": 0.0,
    }


def stated_answer(trace: PiTrace) -> str | None:
    if not trace.assistant_texts:
        return None
    return final_answer([{"role": "assistant", "content": trace.assistant_texts[-1]}])
