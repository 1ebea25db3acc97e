"""piexp's scripted policies (piexp.policies.scripted) answering Pi's chat requests.

A policy decides from what the model sees, as it does in the reference environment:
here that is Pi's request, the OpenAI-style `messages` (the user prompt and every tool
call and result so far), turned into the policy's `Observation`. Its chosen message goes
back in Pi's tool schema: `edit` takes `edits[]` (one `{oldText, newText}` per edit),
the reference environment's single `oldText`/`newText` becomes one entry of it; `bash`
is Pi's general shell, given exactly the command the prompt assigns.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from piexp.harness.pi.commands import command_env
from piexp.policies.observation import Observation, parse_observation
from piexp.policies.scripted import VERIFIED_TASK_POLICIES, ScriptedPolicy


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def observation_of(messages: list[dict[str, Any]]) -> Observation:
    """The policy's view of a Pi request: the prompt from the first user message, and
    one result per tool message, shaped like the reference environment's results as far
    as the policies read them (tool, status, path and content of a read, stdout of a bash)."""
    user = next((m for m in messages if m.get("role") == "user"), None)
    base = parse_observation(_text(user.get("content")) if user else "")
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    results: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                calls[str(call.get("id"))] = (
                    str(function.get("name")),
                    arguments if isinstance(arguments, dict) else {},
                )
        elif message.get("role") == "tool":
            tool, arguments = calls.get(str(message.get("tool_call_id")), ("", {}))
            text = _text(message.get("content"))
            result: dict[str, Any] = {"tool": tool, "status": "ok"}
            if tool == "read":
                result.update(path=arguments.get("path"), content=text)
            elif tool == "bash":
                result.update(stdout=text)
            results.append(result)
    return Observation(
        language=base.language,
        instruction=base.instruction,
        files=base.files,
        filename=base.filename,
        command=base.command,
        results=tuple(results),
    )


def _pi_arguments(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if tool == "edit" and "edits" not in arguments:
        return {
            "path": arguments["path"],
            "edits": [{"oldText": arguments["oldText"], "newText": arguments["newText"]}],
        }
    return arguments


class ScriptedResponder:
    """An endpoint `Responder` playing one scripted policy (stateless: one serves every
    episode of a run at once, as in the reference environment)."""

    def __init__(self, policy: ScriptedPolicy) -> None:
        self.policy = policy

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = list(body.get("messages") or [])
        message = self.policy.next_message(observation_of(messages))
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        answer: dict[str, Any] = {"content": str(message.get("content") or "") or None}
        calls = message.get("tool_calls") or []
        if calls:
            answer["tool_calls"] = [
                {
                    "id": f"call_{turn}_{index}",  # unique in the episode, as Pi's own providers' are
                    "type": "function",
                    "function": {
                        "name": call.function.name,
                        "arguments": json.dumps(_pi_arguments(call.function.name, json.loads(call.function.arguments))),
                    },
                }
                for index, call in enumerate(calls)
            ]
        return answer


class VerifiedTaskResponder:
    """A scripted policy on a task graded by its own verifier (an imported Harbor task),
    whose prompt is its instruction, not piexp's workspace prompt: `oracle` runs the task's
    solution/solve.sh (shown at /solution in its commands' sandboxes) from the working
    folder, then says it is done; `guess` says it did nothing and calls no tool (the
    no-op, which the check requires to score 0). Other policies read piexp's prompt and
    cannot play such a task. (PiHarness shows solution/ to the oracle's episodes alone.)"""

    PLAYABLE = VERIFIED_TASK_POLICIES

    def __init__(self, policy: str, verifier: Any) -> None:
        if policy not in self.PLAYABLE:
            raise ValueError(
                f"the scripted policy {policy!r} cannot play task {verifier.name} (an imported Harbor task): "
                f"its scripted policies are {' and '.join(self.PLAYABLE)}"
            )
        self.policy = policy
        self.verifier = verifier

    def solve_command(self) -> str:
        # The oracle's variables, under piexp's own (its PATH wins, as in every phase).
        own = command_env("")
        exports = "".join(
            f"export {name}={shlex.quote(value)}\n" for name, value in self.verifier.solution_env if name not in own
        )
        return f"cd {shlex.quote(self.verifier.workdir)}\n{exports}bash /solution/solve.sh"

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = list(body.get("messages") or [])
        if self.policy == "guess":
            return {"content": "I did not do the task."}
        if not any(m.get("role") == "tool" for m in messages):
            call = {"command": self.solve_command()}
            return {
                "content": "Running the task's solution.",
                "tool_calls": [{"id": "call_0_0", "type": "function",
                                "function": {"name": "bash", "arguments": json.dumps(call)}}],
            }  # fmt: skip
        return {"content": "Done: the solution ran."}
