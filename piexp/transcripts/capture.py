"""Turn one finished episode into its transcript: a plain JSON object holding the prompt,
every assistant turn (text, thinking, tool calls with their arguments, unparsed tool-call
text), every tool result (the JSON the env returned), the final answer, the reward with
its metric breakdown, the stop reason, token counts per turn and wall time.

Two guarantees are enforced here, on every transcript, before it reaches a file:

* size: every text field is capped at `FIELD_CHARS` characters and the whole transcript
  at `EPISODE_CHARS` (fields are cut harder until it fits); a cut keeps the head and the
  tail and says in the text how many characters went (`[... piexp cut N of M chars ...]`),
  and the transcript's `truncated` counts the cut fields and characters;
* secrets: the value of every environment variable whose name looks like a credential
  (`KEY`, `TOKEN`, `SECRET`, `PASSWORD`, ...) is replaced by `[redacted NAME]`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

# A text field longer than this keeps its head and tail only.
FIELD_CHARS = 20_000
# A whole transcript (serialized) longer than this has its fields cut harder.
EPISODE_CHARS = 400_000
# Environment variable names whose values never appear in a transcript.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
# Values shorter than this are not treated as secrets (too likely to occur by chance).
SECRET_MIN_CHARS = 8
TRANSCRIPT_VERSION = 1


def _cut(text: str, limit: int, stats: dict[str, int]) -> str:
    if len(text) <= limit:
        return text
    head = limit * 4 // 5
    tail = limit - head
    stats["fields"] += 1
    stats["chars_cut"] += len(text) - limit
    return f"{text[:head]}\n[... piexp cut {len(text) - limit} of {len(text)} chars ...]\n{text[len(text) - tail :]}"


def _cap(value: Any, limit: int, stats: dict[str, int]) -> Any:
    if isinstance(value, str):
        return _cut(value, limit, stats)
    if isinstance(value, list):
        return [_cap(item, limit, stats) for item in value]
    if isinstance(value, dict):
        return {key: _cap(item, limit, stats) for key, item in value.items()}
    return value


def _content(content: Any) -> dict[str, str]:
    """Message content (a string or parts) as {text, thinking}."""
    if isinstance(content, str):
        return {"text": content}
    text, thinking = [], []
    for part in content or []:
        if isinstance(part, Mapping):
            if part.get("type") == "thinking":
                thinking.append(str(part.get("thinking", "")))
            elif part.get("type") == "text":
                text.append(str(part.get("text", "")))
            else:
                text.append(f"[{part.get('type')} part]")
    out = {"text": "".join(text)}
    if thinking:
        out["thinking"] = "".join(thinking)
    return out


def message_json(message: Mapping[str, Any]) -> dict[str, Any]:
    """One history message as plain JSON; a tool result's JSON text is parsed."""
    role = str(message.get("role"))
    out: dict[str, Any] = {"role": role, **_content(message.get("content"))}
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = []
        for call in calls:
            try:
                arguments: Any = json.loads(call.function.arguments)
            except ValueError:
                arguments = call.function.arguments  # shown as the model wrote it
            out["tool_calls"].append({"id": call.id, "name": call.function.name, "arguments": arguments})
    unparsed = message.get("unparsed_tool_calls") or []
    if unparsed:
        out["unparsed_tool_calls"] = [{"raw_text": u.raw_text, "error": u.error} for u in unparsed]
    if role == "tool":
        out["name"] = message.get("name")
        out["tool_call_id"] = message.get("tool_call_id")
        try:
            out["result"] = json.loads(out["text"])
            del out["text"]
        except ValueError:
            pass
    return out


def build_transcript(
    record: Any,
    history: Sequence[Mapping[str, Any]],
    prompt_messages: int,
    transitions: Sequence[Any],
    renderer: Any = None,
) -> dict[str, Any]:
    """The transcript of a finished episode. `prompt_messages` is how many history messages
    were the prompt; `renderer` parses a last action the env never put in the history (a
    structural parse failure or a turn cut by the token limit)."""
    prompt = [message_json(m) for m in history[:prompt_messages]]
    conversation = [message_json(m) for m in history[prompt_messages:]]
    turns = []
    for index, transition in enumerate(transitions):
        metrics = {
            k: v
            for k, v in (transition.metrics or {}).items()
            if k.startswith("stop/")
            or k in ("parse_error", "context_overflow", "max_tokens_reached", "max_turns", "max_tool_calls")
        }
        turn: dict[str, Any] = {
            "turn": index,
            "prompt_tokens": transition.ob.length,
            "sampled_tokens": len(transition.ac.tokens),
            "reward": transition.reward,
        }
        if metrics:
            turn["flags"] = metrics
        logs = {
            k: v
            for k, v in (transition.logs or {}).items()
            if k in ("parse_errors", "parse_failure_kind", "parse_failure_detail", "tool_calls_dropped")
        }
        if logs:
            turn["logs"] = logs
        turns.append(turn)
    assistant_turns = sum(1 for m in conversation if m["role"] == "assistant")
    if renderer is not None and transitions and len(transitions) > assistant_turns and transitions[-1].ac.tokens:
        # The env ended the episode before recording this turn: show what was sampled.
        message, termination = renderer.parse_response(list(transitions[-1].ac.tokens))
        shown = message_json(message)
        shown["not_in_history"] = f"ended by the env before it was recorded (parse termination: {termination})"
        conversation.append(shown)
    transcript = {
        "version": TRANSCRIPT_VERSION,
        "policy": record.policy,
        "task_id": record.task_id,
        "family": record.family,
        "split": record.split,
        "language": record.language,
        "sample": record.sample,
        "prompt": prompt,
        "conversation": conversation,
        "turns": turns,
        "answer": record.answer,
        "expected": record.expected,
        "reward": record.reward,
        "shaped": record.shaped,
        "metrics": record.metrics,
        "stop_reason": record.stop_reason,
        "failures": record.failures,
        "wall_s": round(record.wall_s, 4),
        "tokens": {
            "prompt_last": turns[-1]["prompt_tokens"] if turns else 0,
            "sampled": sum(t["sampled_tokens"] for t in turns),
        },
    }
    return finalize(transcript)


def finalize(transcript: dict[str, Any]) -> dict[str, Any]:
    """Cap the sizes and redact secrets (see the module doc); adds `truncated`."""
    stats = {"fields": 0, "chars_cut": 0}
    limit = FIELD_CHARS
    capped = _cap(transcript, limit, stats)
    while len(json.dumps(capped)) > EPISODE_CHARS and limit > 200:
        limit //= 4
        stats = {"fields": 0, "chars_cut": 0}
        capped = _cap(transcript, limit, stats)
    if len(json.dumps(capped)) > EPISODE_CHARS:
        dropped = len(capped["conversation"])
        capped["conversation"] = [
            {
                "role": "note",
                "text": f"[... piexp dropped {dropped} messages: over the {EPISODE_CHARS}-char transcript cap ...]",
            }
        ]
    capped["truncated"] = stats
    return redact(capped)


@lru_cache(maxsize=4)
def _secret_pattern(environment: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str] | None, dict[str, str]]:
    names: dict[str, str] = {}
    for name, value in environment:
        if SECRET_NAME.search(name) and len(value) >= SECRET_MIN_CHARS:
            names[value] = name
            escaped = json.dumps(value)[1:-1]  # the form it takes inside a JSON string
            names.setdefault(escaped, name)
    if not names:
        return None, names
    # Longest first, so a secret containing another is replaced whole.
    alternatives = sorted(names, key=len, reverse=True)
    return re.compile("|".join(re.escape(v) for v in alternatives)), names


def redact(transcript: dict[str, Any]) -> dict[str, Any]:
    """The transcript with every environment secret replaced by `[redacted NAME]`."""
    pattern, names = _secret_pattern(tuple(sorted(os.environ.items())))
    if pattern is None:
        return transcript
    text = json.dumps(transcript)
    if not pattern.search(text):
        return transcript
    return json.loads(pattern.sub(lambda match: f"[redacted {names[match.group(0)]}]", text))
