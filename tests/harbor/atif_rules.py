"""The ATIF trajectory schema as Harbor 0.25.0 defines it (`harbor/models/trajectories/`:
Trajectory, Agent, Step, ToolCall, Observation, ObservationResult, Metrics, FinalMetrics,
ContentPart, ImageSource, AudioSource, SubagentTrajectoryRef), written down as a checker so
piexp's Python 3.11 suite validates trajectories where Harbor (3.12+) cannot be imported.
Every model forbids unknown fields; each required field, type and cross-field rule of those
models is checked below. `atif_errors` returns what is wrong (empty: valid)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

VERSIONS = {f"ATIF-v1.{minor}" for minor in range(9)}
AUDIO_TYPES = {"audio/wav", "audio/mpeg", "audio/mp4", "audio/aac", "audio/ogg", "audio/flac", "audio/webm",
               "audio/aiff"}  # fmt: skip
IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, where: str, what: str) -> None:
        self.errors.append(f"{where}: {what}")

    def fields(self, where: str, data: Any, required: dict[str, Any], optional: dict[str, Any]) -> bool:
        """`data` an object with every required field, no unknown one, each of its type
        (a predicate); absent or null optional fields are fine."""
        if not isinstance(data, dict):
            self.fail(where, f"not an object: {data!r:.80}")
            return False
        for name in set(data) - set(required) - set(optional):
            self.fail(where, f"unknown field {name!r} (extra='forbid')")
        for name, check in required.items():
            if name not in data or data[name] is None:
                self.fail(where, f"required field {name!r} missing")
            elif not check(data[name]):
                self.fail(where, f"{name} has the wrong type or value: {data[name]!r:.80}")
        for name, check in optional.items():
            if data.get(name) is not None and not check(data[name]):
                self.fail(where, f"{name} has the wrong type or value: {data[name]!r:.80}")
        return True

    def content(self, where: str, value: Any) -> bool:
        if isinstance(value, str):
            return True
        if not isinstance(value, list):
            return False
        for index, part in enumerate(value):
            here = f"{where}[{index}]"
            if not self.fields(here, part, {"type": lambda t: t in ("text", "image", "audio")},
                               {"text": lambda t: isinstance(t, str), "source": lambda s: isinstance(s, dict)}):  # fmt: skip
                continue
            if part["type"] == "text":
                if part.get("text") is None or part.get("source") is not None:
                    self.fail(here, "a text part has text and no source")
                continue
            if part.get("source") is None or part.get("text") is not None:
                self.fail(here, "a media part has a source and no text")
                continue
            types = IMAGE_TYPES if part["type"] == "image" else AUDIO_TYPES
            optional = {"duration_sec": lambda d: _is_number(d) and d >= 0} if part["type"] == "audio" else {}
            self.fields(f"{here}.source", part["source"],
                        {"media_type": lambda m: m in types, "path": lambda p: isinstance(p, str)}, optional)  # fmt: skip
        return True

    def step(self, where: str, step: Any, index: int) -> None:
        def timestamp(value: Any) -> bool:
            try:
                datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            except ValueError:
                return False
            return isinstance(value, str)

        if not self.fields(
            where, step,
            {"step_id": lambda v: _is_int(v) and v >= 1, "source": lambda v: v in ("system", "user", "agent"),
             "message": lambda v: self.content(f"{where}.message", v)},
            {"timestamp": timestamp, "model_name": lambda v: isinstance(v, str),
             "reasoning_effort": lambda v: isinstance(v, str) or _is_number(v),
             "reasoning_content": lambda v: isinstance(v, str), "tool_calls": lambda v: isinstance(v, list),
             "observation": lambda v: isinstance(v, dict), "metrics": lambda v: isinstance(v, dict),
             "is_copied_context": lambda v: isinstance(v, bool), "llm_call_count": lambda v: _is_int(v) and v >= 0,
             "extra": lambda v: isinstance(v, dict)},
        ):  # fmt: skip
            return
        if step.get("step_id") != index + 1:
            self.fail(where, f"step_id {step.get('step_id')} is not {index + 1} (sequential from 1)")
        if step.get("source") != "agent":
            for name in AGENT_ONLY:
                if step.get(name) is not None:
                    self.fail(where, f"{name} only on a source 'agent' step")
        elif step.get("llm_call_count") == 0:
            for name in ("metrics", "reasoning_content"):
                if step.get(name) is not None:
                    self.fail(where, f"{name} must be absent when llm_call_count is 0")
        ids = set()
        for number, call in enumerate(step.get("tool_calls") or []):
            self.fields(f"{where}.tool_calls[{number}]", call,
                        {"tool_call_id": lambda v: isinstance(v, str), "function_name": lambda v: isinstance(v, str),
                         "arguments": lambda v: isinstance(v, dict)},
                        {"extra": lambda v: isinstance(v, dict)})  # fmt: skip
            if isinstance(call, dict):
                ids.add(call.get("tool_call_id"))
        if step.get("metrics") is not None:
            self.fields(f"{where}.metrics", step["metrics"], {},
                        {"prompt_tokens": _is_int, "completion_tokens": _is_int, "cached_tokens": _is_int,
                         "cost_usd": _is_number, "prompt_token_ids": lambda v: isinstance(v, list) and all(map(_is_int, v)),
                         "completion_token_ids": lambda v: isinstance(v, list) and all(map(_is_int, v)),
                         "logprobs": lambda v: isinstance(v, list) and all(map(_is_number, v)),
                         "extra": lambda v: isinstance(v, dict)})  # fmt: skip
        if step.get("observation") is not None:
            observation = step["observation"]
            if self.fields(f"{where}.observation", observation, {"results": lambda v: isinstance(v, list)}, {}):
                for number, result in enumerate(observation.get("results") or []):
                    here = f"{where}.observation.results[{number}]"
                    self.fields(here, result, {},
                                {"source_call_id": lambda v: isinstance(v, str),
                                 "content": lambda v: self.content(f"{here}.content", v),
                                 "subagent_trajectory_ref": lambda v: isinstance(v, list),
                                 "extra": lambda v: isinstance(v, dict)})  # fmt: skip
                    if isinstance(result, dict):
                        source = result.get("source_call_id")
                        if source is not None and source not in ids:
                            self.fail(here, f"source_call_id {source!r} is not a tool_call_id of this step")
                        for ref_index, ref in enumerate(result.get("subagent_trajectory_ref") or []):
                            self.subagent_ref(f"{here}.subagent_trajectory_ref[{ref_index}]", ref)

    def subagent_ref(self, where: str, ref: Any) -> None:
        if self.fields(where, ref, {}, {"trajectory_id": lambda v: isinstance(v, str),
                                        "session_id": lambda v: isinstance(v, str),
                                        "trajectory_path": lambda v: isinstance(v, str),
                                        "extra": lambda v: isinstance(v, dict)}):  # fmt: skip
            if ref.get("trajectory_id") is None and ref.get("trajectory_path") is None:
                self.fail(where, "a subagent reference needs trajectory_id or trajectory_path")

    def trajectory(self, where: str, data: Any) -> None:
        if not self.fields(
            where, data,
            {"agent": lambda v: isinstance(v, dict), "steps": lambda v: isinstance(v, list) and len(v) >= 1},
            {"schema_version": lambda v: v in VERSIONS, "session_id": lambda v: isinstance(v, str),
             "trajectory_id": lambda v: isinstance(v, str), "notes": lambda v: isinstance(v, str),
             "final_metrics": lambda v: isinstance(v, dict), "continued_trajectory_ref": lambda v: isinstance(v, str),
             "extra": lambda v: isinstance(v, dict), "subagent_trajectories": lambda v: isinstance(v, list)},
        ):  # fmt: skip
            return
        self.fields(f"{where}.agent", data["agent"],
                    {"name": lambda v: isinstance(v, str), "version": lambda v: isinstance(v, str)},
                    {"model_name": lambda v: isinstance(v, str), "extra": lambda v: isinstance(v, dict),
                     "tool_definitions": lambda v: isinstance(v, list) and all(isinstance(d, dict) for d in v)})  # fmt: skip
        for index, step in enumerate(data.get("steps") or []):
            self.step(f"{where}.steps[{index}]", step, index)
        if data.get("final_metrics") is not None:
            self.fields(f"{where}.final_metrics", data["final_metrics"], {},
                        {"total_prompt_tokens": _is_int, "total_completion_tokens": _is_int,
                         "total_cached_tokens": _is_int, "total_cost_usd": _is_number,
                         "total_steps": lambda v: _is_int(v) and v >= 0, "extra": lambda v: isinstance(v, dict)})  # fmt: skip
        seen: set[str] = set()
        for index, sub in enumerate(data.get("subagent_trajectories") or []):
            here = f"{where}.subagent_trajectories[{index}]"
            self.trajectory(here, sub)
            if isinstance(sub, dict):
                if sub.get("trajectory_id") is None or sub["trajectory_id"] in seen:
                    self.fail(here, "an embedded subagent needs a unique trajectory_id")
                seen.add(sub.get("trajectory_id"))


def atif_errors(data: Any) -> list[str]:
    checker = _Checker()
    checker.trajectory("trajectory", data)
    return checker.errors
