"""Replay recorded episodes against today's code: each recorded assistant turn is
rendered back into the tokens the model emitted (`ReplayPolicy`), and the episode runs
again, in the harness that played it, through today's renderer parse, tools, sandbox
and reward (in Pi: today's Pi, its requests answered with the recorded turns). The new
conversation is compared with the recording message by message; the first difference is
named (a parse, a tool result, the stop reason, the reward or a reward metric).

What is compared of a tool result is what the reward reads, so that output that depends
on wall time or randomness does not count as a change: for `bash`, the status, return
code, `output_correct` and the last non-empty stdout line; for the other tools, the whole
result. An assistant message's text is compared in Unicode NFC: replay tokenizes the
recorded text again, and the tokenizer normalizes it to NFC, so a sampled turn whose text
was not NFC (a CJK compatibility ideograph, a letter followed by its combining accent:
common in an untrained model's output) comes back normalized, the same text."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from tinker_cookbook import renderers
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.renderers.base import UNTERMINATED_TOOL_BLOCK_ERROR, Message, ToolCall

from piexp.env.episode import EpisodeSettings
from piexp.env.reward import REWARD_METRICS
from piexp.env.tools import last_nonempty_line
from piexp.harness.base import Harness
from piexp.policies.rollout import EpisodeRecord
from piexp.policies.scripted import render_assistant_tokens
from piexp.tasks import Task


def text_before_calls(message: dict[str, Any]) -> str:
    """An assistant message's text without the newline the Qwen3 renderers write before
    each tool call, which tinker-cookbook 0.5.8's parse keeps in the text (rendering the
    parsed message again would write it twice: see piexp.env.sampled_context)."""
    text = str(message.get("text", ""))
    for _call in message.get("tool_calls") or []:
        if text.endswith("\n"):
            text = text[:-1]
    return text


def recorded_message(message: dict[str, Any]) -> Message:
    """A transcript's assistant message as the cookbook message the model's tokens parsed
    into (text, thinking, tool calls; a tool call the parser could not read is put back
    as the raw text it was)."""
    text = text_before_calls(message)
    for unparsed in message.get("unparsed_tool_calls") or []:
        # A tool block the turn never closed stays in the text (the parse describes it,
        # it does not take it out); a closed block it could not read was taken out.
        if not str(unparsed.get("error", "")).startswith(UNTERMINATED_TOOL_BLOCK_ERROR):
            text += str(unparsed.get("raw_text", ""))
    content: Any = text
    if message.get("thinking"):
        content = [{"type": "thinking", "thinking": message["thinking"]}, {"type": "text", "text": text}]
    out: dict[str, Any] = {"role": "assistant", "content": content}
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call.get("arguments")
        calls.append(
            ToolCall(
                function=ToolCall.FunctionBody(
                    name=str(call.get("name")),
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
                ),
                id=call.get("id") or f"call_{index}",
            )
        )
    if calls:
        out["tool_calls"] = calls
    return out  # type: ignore[return-value]


class ReplayExhaustedError(Exception):
    """Today's env asked for a turn the recording does not have."""


class ReplayPolicy(TokenCompleter):
    """Emits the recorded assistant turns, in order, as the tokens the renderer writes,
    each with the stop reason it was sampled with: a turn the token limit cut
    (`max_tokens_reached` in its recorded flags) stops with "length" again, so that the env
    ends the episode as it did, ungraded, instead of parsing a turn the model never ended."""

    def __init__(
        self, renderer: renderers.Renderer, messages: Sequence[Message], cut: Sequence[bool] | None = None
    ) -> None:
        self.renderer = renderer
        self.messages = list(messages)
        self.cut = list(cut or [False] * len(self.messages))
        self.turn = 0

    async def __call__(
        self, model_input: Any, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        if self.turn >= len(self.messages):
            raise ReplayExhaustedError(f"today's env asked for turn {self.turn + 1}; the recording has {self.turn}")
        tokens = render_assistant_tokens(self.renderer, self.messages[self.turn], stop)
        stop_reason: Literal["length", "stop"] = (
            "length" if self.turn < len(self.cut) and self.cut[self.turn] else "stop"
        )
        if stop_reason == "length":
            # The cut turn never ended: without its end-of-turn token it parses (in the
            # recording's transcript) to what the recorded cut tokens parsed to.
            ends = {s for s in [*(stop or []), *self.renderer.get_stop_sequences()] if isinstance(s, int)}
            while tokens and tokens[-1] in ends:
                tokens = tokens[:-1]
        self.turn += 1
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens), stop_reason=stop_reason)


def compared_result(result: Any) -> Any:
    """What the reward reads of a tool result (see the module docstring)."""
    if isinstance(result, dict) and result.get("tool") == "bash" and "return_code" in result:
        return {
            "status": result.get("status"),
            "return_code": result.get("return_code"),
            "output_correct": result.get("output_correct"),
            "last_line": last_nonempty_line(str(result.get("stdout") or "")),
        }
    return result


def _compared_message(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role == "tool":
        return {"role": "tool", "result": compared_result(message.get("result", message.get("text")))}
    return {
        "role": role,
        "text": _nfc(text_before_calls(message)),
        "tool_calls": [
            (
                c.get("name"),
                _nfc(
                    c.get("arguments")
                    if isinstance(c.get("arguments"), str)
                    else json.dumps(c.get("arguments"), sort_keys=True)
                ),
            )
            for c in message.get("tool_calls") or []
        ],
        "unparsed": [_nfc(str(u.get("raw_text"))) for u in message.get("unparsed_tool_calls") or []],
    }


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


@dataclass
class Difference:
    where: str  # "turn 3", "end of episode"
    kind: str  # parse, tool result, missing message, stop reason, reward, metric NAME, replay
    recorded: Any
    replayed: Any


@dataclass
class ReplayOutcome:
    episode: str
    task_id: str
    family: str
    language: str
    policy: str
    sample: int
    recorded_reward: float
    replayed_reward: float | None
    recorded_shaped: float
    replayed_shaped: float | None
    difference: Difference | None

    @property
    def identical(self) -> bool:
        return self.difference is None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["identical"] = self.identical
        return data


def first_difference(recorded: dict[str, Any], replayed: dict[str, Any]) -> Difference | None:
    """The first way the replayed transcript differs from the recorded one, or None."""
    old = recorded.get("conversation") or []
    new = replayed.get("conversation") or []
    turn = 0
    for index in range(max(len(old), len(new))):
        if index < len(old) and old[index].get("role") == "assistant":
            turn += 1
        where = f"turn {max(turn, 1)}"
        if index >= len(old) or index >= len(new):
            extra = new[index] if index < len(new) else old[index]
            return Difference(where, "missing message", old[index] if index < len(old) else None, extra)
        a, b = _compared_message(old[index]), _compared_message(new[index])
        if a != b:
            kind = "tool result" if a.get("role") == "tool" else "parse"
            return Difference(where, kind, a, b)
    if recorded.get("stop_reason") != replayed.get("stop_reason"):
        return Difference("end of episode", "stop reason", recorded.get("stop_reason"), replayed.get("stop_reason"))
    for key in ("reward", "shaped"):
        if abs(float(recorded.get(key) or 0.0) - float(replayed.get(key) or 0.0)) > 1e-9:
            return Difference("end of episode", key, recorded.get(key), replayed.get(key))
    for name in REWARD_METRICS:
        old_metric = (recorded.get("metrics") or {}).get(name)
        new_metric = (replayed.get("metrics") or {}).get(name)
        if old_metric != new_metric:
            return Difference("end of episode", f"metric {name}", old_metric, new_metric)
    return None


def turns_cut_at_max_tokens(transcript: dict[str, Any]) -> list[bool]:
    """Per recorded turn (one a sampled assistant message, in order), whether the token
    limit cut it: the cookbook's `max_tokens_reached` flag on the turn."""
    return [bool((turn.get("flags") or {}).get("max_tokens_reached")) for turn in transcript.get("turns") or []]


async def replay_episode(
    transcript: dict[str, Any], task: Task, settings: EpisodeSettings, renderer: renderers.Renderer, harness: Harness
) -> ReplayOutcome:
    """Play the recorded episode again through today's code, in the harness that played
    it (its recorded turns are the model's answers, whatever the harness asks); compare."""
    messages = [recorded_message(m) for m in transcript.get("conversation") or [] if m.get("role") == "assistant"]
    policy = ReplayPolicy(renderer, messages, turns_cut_at_max_tokens(transcript))
    record: EpisodeRecord = await harness.play(
        policy,
        str(transcript.get("policy")),
        task,
        str(transcript.get("language")),
        settings,
        sample=int(transcript.get("sample") or 0),
    )
    outcome = ReplayOutcome(
        episode=f"{transcript.get('policy')} {transcript.get('task_id')} {transcript.get('language')} "
        f"#{transcript.get('sample')}",
        task_id=str(transcript.get("task_id")),
        family=str(transcript.get("family")),
        language=str(transcript.get("language")),
        policy=str(transcript.get("policy")),
        sample=int(transcript.get("sample") or 0),
        recorded_reward=float(transcript.get("reward") or 0.0),
        replayed_reward=None if record.error else record.reward,
        recorded_shaped=float(transcript.get("shaped") or 0.0),
        replayed_shaped=None if record.error else record.shaped,
        difference=None,
    )
    if record.error or record.transcript is None:
        outcome.difference = Difference(f"turn {policy.turn}", "replay", None, record.error)
    else:
        outcome.difference = first_difference(transcript, record.transcript)
    return outcome
