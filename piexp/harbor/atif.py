"""Recorded episodes as ATIF trajectories (Agent Trajectory Interchange Format, the schema
of Harbor 0.25.0's `harbor.models.trajectories`), one `trajectory.json`-shaped file per
episode.

An episode's transcript becomes: a `system` step (the system prompt), a `user` step (the
task's prompt), then one `agent` step per assistant turn with its text, its thinking as
`reasoning_content`, its tool calls (`tool_call_id`, `function_name`, `arguments`) and, as
its `observation`, the tool results that answered them, each linked by `source_call_id`.
A turn's token counts are its `metrics` (`prompt_tokens`, `completion_tokens`); token ids
and per-token logprobs go there too when the transcript recorded them. A scripted policy's
turns are not a model's: their steps say `llm_call_count = 0` and carry no metrics (ATIF
forbids them there). piexp's reward, its step metrics, the task's identity and digest are
the root's `extra.piexp`."""

from __future__ import annotations

from piexp.run_folder import RunFolder

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ATIF_VERSION = "ATIF-v1.8"
MODEL_POLICY = "model"
# Transcript turn fields carried into a step's metrics under ATIF's names, when recorded.
_TOKEN_FIELDS = {
    "prompt_token_ids": "prompt_token_ids",
    "sampled_token_ids": "completion_token_ids",
    "sampled_logprobs": "logprobs",
}
_EPISODE_FIELDS = ("task_id", "family", "split", "language", "sample", "policy", "answer", "expected", "reward",
                   "shaped", "metrics", "stop_reason", "failures", "wall_s", "task_digest", "iteration", "group",
                   "trained_reward", "truncated", "omitted", "verifier")  # fmt: skip
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class RunAgent:
    """Who played a run's episodes: the harness and, for `policy=model`, the model."""

    harness: str
    model_name: str | None
    piexp_version: str


def run_agent(folder: Path) -> RunAgent:
    """The harness and model a run folder's config names (`.hydra/config.yaml`), and the
    piexp version its manifest recorded."""
    import yaml

    config: dict[str, Any] = {}
    path = folder / RunFolder.CONFIG
    if path.is_file():
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    manifest: dict[str, Any] = {}
    if (folder / RunFolder.MANIFEST).is_file():
        manifest = json.loads((folder / RunFolder.MANIFEST).read_text(encoding="utf-8"))
    harness = (config.get("harness") or {}).get("name") or "builtin"
    model = (config.get("model") or {}).get("name")
    version = (manifest.get("packages") or {}).get("piexp") or "unknown"
    return RunAgent(harness=str(harness), model_name=model, piexp_version=str(version))


def _text(message: Mapping[str, Any]) -> str:
    return str(message.get("text") or "")


def _observation_content(message: Mapping[str, Any]) -> str:
    if "result" in message:
        return json.dumps(message["result"], ensure_ascii=False)
    return _text(message)


def _tool_calls(message: Mapping[str, Any], step_id: int) -> list[dict[str, Any]]:
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call.get("arguments")
        entry: dict[str, Any] = {
            "tool_call_id": str(call.get("id") or f"call-{step_id}-{index}"),
            "function_name": str(call.get("name")),
            "arguments": arguments if isinstance(arguments, dict) else {},
        }
        if not isinstance(arguments, dict):
            entry["extra"] = {"unparsed_arguments": arguments}  # as the model wrote them
        calls.append(entry)
    return calls


def _link(results: list[Mapping[str, Any]], calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool result with the call it answers: by its tool_call_id where it names one of
    the step's calls, else the step's next unanswered call in order (piexp's own tools
    answer in call order and may leave the id empty)."""
    ids = [call["tool_call_id"] for call in calls]
    unanswered = list(ids)
    linked = []
    for result in results:
        named = str(result.get("tool_call_id") or "")
        source = named if named in unanswered else (unanswered[0] if unanswered else None)
        if source is not None:
            unanswered.remove(source)
        entry: dict[str, Any] = {"content": _observation_content(result)}
        if source is not None:
            entry["source_call_id"] = source
        if result.get("name"):
            entry["extra"] = {"tool": result.get("name")}
        linked.append(entry)
    return linked


def _metrics(turn: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not turn:
        return None
    metrics: dict[str, Any] = {
        "prompt_tokens": int(turn.get("prompt_tokens") or 0),
        "completion_tokens": int(turn.get("sampled_tokens") or 0),
    }
    for recorded, atif in _TOKEN_FIELDS.items():
        if turn.get(recorded) is not None:
            metrics[atif] = list(turn[recorded])
    extra = {key: turn[key] for key in ("reward", "flags", "sampled_logprob") if key in turn}
    if extra:
        metrics["extra"] = extra
    return metrics


def _agent_step(step_id: int, message: Mapping[str, Any], turn: Mapping[str, Any] | None, by_model: bool) -> dict:
    step: dict[str, Any] = {"step_id": step_id, "source": "agent", "message": _text(message)}
    if by_model and message.get("thinking"):
        step["reasoning_content"] = str(message["thinking"])
    calls = _tool_calls(message, step_id)
    if calls:
        step["tool_calls"] = calls
    extra = {key: message[key] for key in ("unparsed_tool_calls", "not_in_history") if message.get(key)}
    if not by_model:
        step["llm_call_count"] = 0  # a scripted policy's turn: no model was called
        if turn:
            extra["turn"] = dict(turn)
        if message.get("thinking"):
            extra["thinking"] = message["thinking"]
    else:
        step["llm_call_count"] = 1
        metrics = _metrics(turn)
        if metrics is not None:
            step["metrics"] = metrics
    if extra:
        step["extra"] = extra
    return step


def trajectory(transcript: Mapping[str, Any], agent: RunAgent, source: str, session: str) -> dict[str, Any]:
    """One episode's ATIF trajectory (a JSON object)."""
    by_model = transcript.get("policy") == MODEL_POLICY
    steps: list[dict[str, Any]] = []
    for message in transcript.get("prompt") or []:
        role = "system" if message.get("role") == "system" else "user"
        steps.append({"step_id": len(steps) + 1, "source": role, "message": _text(message)})
    turns = list(transcript.get("turns") or [])
    conversation = list(transcript.get("conversation") or [])
    answered = 0
    index = 0
    while index < len(conversation):
        message = conversation[index]
        index += 1
        if message.get("role") != "assistant":
            # A note (messages cut for size) or a result with no turn before it.
            steps.append({"step_id": len(steps) + 1, "source": "system", "message": _observation_content(message)})
            continue
        turn = turns[answered] if answered < len(turns) else None
        answered += 1
        step = _agent_step(len(steps) + 1, message, turn, by_model)
        results = []
        while index < len(conversation) and conversation[index].get("role") == "tool":
            results.append(conversation[index])
            index += 1
        if results:
            step["observation"] = {"results": _link(results, step.get("tool_calls") or [])}
        steps.append(step)
    if not steps:  # a stub: the run kept no conversation for this episode
        note = transcript.get("omitted") or "no conversation was recorded for this episode"
        steps.append({"step_id": 1, "source": "system", "message": str(note)})
    model_name = agent.model_name if by_model else f"scripted:{transcript.get('policy')}"
    prompt_tokens = sum(int(turn.get("prompt_tokens") or 0) for turn in turns)
    sampled_tokens = sum(int(turn.get("sampled_tokens") or 0) for turn in turns)
    final: dict[str, Any] = {"total_steps": len(steps)}
    if by_model:
        final.update(total_prompt_tokens=prompt_tokens, total_completion_tokens=sampled_tokens)
    return {
        "schema_version": ATIF_VERSION,
        "session_id": session,
        "trajectory_id": session,
        "agent": {
            "name": f"piexp-{agent.harness}",
            "version": agent.piexp_version,
            **({"model_name": model_name} if model_name else {}),
            "extra": {"harness": agent.harness, "policy": transcript.get("policy")},
        },
        "steps": steps,
        "final_metrics": final,
        "extra": {"piexp": {"source": source, **{k: transcript[k] for k in _EPISODE_FIELDS if k in transcript}}},
    }


def file_name(transcript: Mapping[str, Any], source: str) -> str:
    parts = [source, transcript.get("policy"), transcript.get("task_id"), transcript.get("language")]
    parts.append(f"s{transcript.get('sample') or 0}")
    if transcript.get("iteration") is not None:
        parts += [f"it{transcript['iteration']}", f"g{transcript.get('group') or 0}"]
    return _UNSAFE.sub("-", "-".join(str(part) for part in parts)) + ".json"


def write_trajectories(
    out: Path, episodes: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]], root: Path
) -> list[Path]:
    """One ATIF file per (row, transcript) under `out` (a sweep's jobs in subfolders)."""
    agents: dict[str, RunAgent] = {}
    written = []
    for row, transcript in episodes:
        job = str(row.get("job") or ".")
        if job not in agents:
            agents[job] = run_agent(root / job)
        source = str(row.get("source"))
        folder = out if job == "." else out / job
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / file_name(transcript, source)
        session = f"{root.name}/{job}/{path.stem}" if job != "." else f"{root.name}/{path.stem}"
        data = trajectory(transcript, agents[job], source, session)
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    return written
