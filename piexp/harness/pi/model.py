"""The `model` policy answering Pi: each chat request is rendered with the run's renderer,
sampled through the run's token completer (its service: Tinker, `service=local`,
`service=selfhosted`) and parsed back into an OpenAI-style message. Every call records
its prompt tokens, sampled tokens and their logprobs (`SampledCall`).

This is what tinker-cookbook's `capture/proxy` does for a harness (render with
`create_conversation_prefix_with_tools`, sample, `parse_response`); piexp does it here
instead of mounting that proxy because the proxy samples through a `SamplingClient` and
records into the capture store, while an episode needs the run's own token completer
(its retries and service-failure handling, piexp.policies.model) and its tokens and
logprobs in the episode's record. Its request parsing is private to the proxy's module;
this is a small subset of it: text, tool calls and tool results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import TokenCompleter
from tinker_cookbook.renderers.base import Message, ToolCall, ToolSpec

from piexp.harness.endpoint import LimitReached
from piexp.harness.pi.scoring import MAX_TOKENS, PARSE_ERROR, ScoringRule, retry_messages


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def conversation(body: dict[str, Any]) -> tuple[str, list[Message], list[ToolSpec]]:
    """(system text, messages, tool specs) of an OpenAI chat request."""
    system: list[str] = []
    messages: list[Message] = []
    names: dict[str, str] = {}
    for raw in body.get("messages") or []:
        role = raw.get("role")
        text = _text(raw.get("content"))
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            messages.append(Message(role="user", content=text))
        elif role == "assistant":
            message = Message(role="assistant", content=text)
            calls = []
            for call in raw.get("tool_calls") or []:
                function = call.get("function") or {}
                names[str(call.get("id"))] = str(function.get("name"))
                calls.append(
                    ToolCall(
                        function=ToolCall.FunctionBody(
                            name=str(function.get("name")), arguments=str(function.get("arguments") or "{}")
                        ),
                        id=str(call.get("id")),
                    )
                )
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        elif role == "tool":
            call_id = str(raw.get("tool_call_id"))
            messages.append(Message(role="tool", content=text, tool_call_id=call_id, name=names.get(call_id, "")))
    tools = [
        ToolSpec(
            name=str((t.get("function") or {}).get("name")),
            description=str((t.get("function") or {}).get("description") or ""),
            parameters=(t.get("function") or {}).get("parameters") or {"type": "object", "properties": {}},
        )
        for t in body.get("tools") or []
    ]
    return "\n\n".join(system), messages, tools


@dataclass
class SampledCall:
    """One model call of an episode: the tokens the model saw and the ones it sampled."""

    prompt_tokens: list[int]
    sampled_tokens: list[int]
    logprobs: list[float] | None
    stop_reason: str


def sequence_splits(calls: list[SampledCall]) -> int:
    """How many of an episode's calls do not extend the one before token for token (its
    prompt does not start with the previous prompt and what was sampled after it): where
    Pi's re-sent history re-renders to other tokens than the model produced, a training
    sequence would have to be split, never trained on tokens the model did not sample."""
    splits = 0
    for before, after in zip(calls, calls[1:]):
        sent = before.prompt_tokens + before.sampled_tokens
        splits += after.prompt_tokens[: len(sent)] != sent
    return splits


CUT = "cut at limits.max_generation_tokens"
UNPARSED = "no tool call could be read: the episode ends here"


class ModelView:
    """One episode as the model saw it, for its transcript: Pi's system prompt and
    messages, the turns piexp answered itself (a retried malformed turn and its corrective
    message), and a last turn that never reached Pi (cut, or malformed past the rule)."""

    def __init__(self) -> None:
        self.history: list[Message] = []
        self._from_pi = 0  # how many of Pi's messages `history` holds

    def request(self, body: dict[str, Any]) -> None:
        """One of Pi's requests: the messages it adds."""
        system, messages, _tools = conversation(body)
        if not self.history and system:
            self.history.append(Message(role="system", content=system))
        if len(messages) < self._from_pi:  # Pi rewrote its history: shown afresh
            self.history.append(Message(role="user", content="[Pi re-sent a shorter history from here]"))
            self._from_pi = 0
        self.history += messages[self._from_pi :]
        self._from_pi = len(messages) + 1  # and the answer it is given, which its next request re-sends

    def answer(self, message: Message) -> None:
        self.history.append(message)

    def retry(self, malformed: Message, text: str) -> None:
        self.history += retry_messages(malformed, text)

    def unsent(self, message: Message, why: str) -> None:
        shown = Message(**message)
        shown["content"] = f"{renderers.get_text_content(message)}\n[{why}; Pi never saw this turn]"
        self.history.append(shown)

    def show(self, transcript: dict[str, Any], calls: list[SampledCall], reward: float) -> None:
        """`transcript` from the model's side: a turn per model call (what it saw and
        sampled, logprobs summed), the calls Pi never answered included, and the
        conversation as the model saw it."""
        from piexp.transcripts.capture import finalize

        calls = [call for call in calls if call.sampled_tokens]
        if not calls:
            return
        transcript["turns"] = [
            {"turn": i, "prompt_tokens": len(call.prompt_tokens), "sampled_tokens": len(call.sampled_tokens),
             "sampled_logprob": sum(call.logprobs or []), "reward": reward if i == len(calls) - 1 else 0.0}
            for i, call in enumerate(calls)
        ]  # fmt: skip
        transcript["tokens"] = {
            "prompt_last": len(calls[-1].prompt_tokens),
            "sampled": sum(len(call.sampled_tokens) for call in calls),
            "splits": sequence_splits(calls),
        }
        if self.history:
            transcript["prompt"], transcript["conversation"] = shown_history(self.history)
        transcript.update(finalize(transcript))


def chat_history(messages: list[dict[str, Any]]) -> list[Message]:
    """OpenAI-style chat messages (a request Pi sent, and its answer) as the renderer's
    messages: the system text first, then the conversation."""
    system, history, _tools = conversation({"messages": messages})
    return [Message(role="system", content=system), *history] if system else history


def shown_history(history: list[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(prompt, conversation) of a transcript, as the reference environment's transcripts
    show messages: the system prompt and first user message, then the rest."""
    from piexp.transcripts.capture import message_json

    shown = [message_json(m) for m in history]
    prompt = [m for m in shown[:2] if m["role"] in ("system", "user")]
    return prompt, shown[len(prompt) :]


def render_request(
    renderer: renderers.Renderer, body: dict[str, Any], extra: list[Message] | None = None
) -> tinker.ModelInput:
    """The tokens the model sees for one of Pi's chat requests: its system prompt with its
    tools, then the history (and `extra`, turns piexp answered itself), as the run's
    renderer writes them, ready for a reply."""
    system, messages, tools = conversation(body)
    messages += extra or []
    prefix = renderer.create_conversation_prefix_with_tools(tools, system_prompt=system) if tools else []
    if not tools and system:
        prefix = [Message(role="system", content=system)]
    return renderer.build_generation_prompt([*prefix, *messages])


class Observations:
    """The tokens the model sees for each of one episode's requests, extending the last
    observation wherever Pi's re-sent history allows it.

    Pi sends the whole history with each request, the model's earlier turns as Pi parsed
    them; rendered anew (`render_request`), a turn the model wrote in a form of its own
    (other whitespace around a tool call, another key order in its arguments) comes back
    as the renderer's canonical tokens, not the ones sampled, and the training sequence
    would have to be split there. So when a request renders to exactly the previous
    request plus the canonical tokens of the answer Pi was given, then more (the tool
    results and a new generation prompt), the observation is the previous observation,
    the tokens actually sampled, then that more: what the model produced stays in its
    context verbatim, as in a token-in-token-out rollout. Where the history does not
    extend (Pi rewrote it, or the last turn was cut before its end-of-turn token) the
    request is rendered as it stands and `sequence_splits` counts the place."""

    def __init__(self, renderer: renderers.Renderer) -> None:
        self.renderer = renderer
        self._stops = renderer.get_stop_sequences()
        self._pending: tuple[list[int], list[int]] | None = None  # (canonical, observation) awaiting its answer
        self._last: tuple[list[int], list[int], list[int]] | None = None  # (canonical + answer, observation, sampled)

    def observe(self, body: dict[str, Any], extra: list[Message] | None = None) -> tinker.ModelInput:
        """The observation for one of Pi's requests, followed by `extra` (turns piexp
        answered itself: a malformed turn and its corrective message); `answered` follows."""
        canonical = render_request(self.renderer, body, extra).to_ints()
        observation = canonical
        if self._last is not None:
            answered, seen, sampled = self._last
            if len(canonical) > len(answered) and canonical[: len(answered)] == answered:
                observation = seen + sampled + canonical[len(answered) :]
        self._pending = (canonical, observation)
        return tinker.ModelInput.from_ints(observation)

    def answered(self, sampled: list[int], answer: Message) -> None:
        """The model sampled `sampled` for the last observation, read as `answer`."""
        from piexp.policies.scripted import render_assistant_tokens

        assert self._pending is not None, "answered() follows observe()"
        canonical, observation = self._pending
        self._pending = None
        ended = bool(sampled) and sampled[-1] in [s for s in self._stops if isinstance(s, int)]
        if not ended:
            self._last = None  # a turn cut before its end: what follows cannot extend it
            return
        emitted = render_assistant_tokens(self.renderer, answer, self._stops)
        self._last = (canonical + emitted, observation, list(sampled))


def answer_message(renderer: renderers.Renderer, tokens: list[int], call_index: int) -> dict[str, Any]:
    """The OpenAI-style assistant message Pi gets for sampled `tokens`: their text and
    tool calls as the renderer parses them (a call without an id is given one). A turn
    whose tool calls all failed to parse never reaches Pi (`ScoringRule`)."""
    message, _termination = renderer.parse_response(list(tokens))
    answer: dict[str, Any] = {"content": renderers.get_text_content(message) or None}
    calls = message.get("tool_calls") or []
    if calls:
        answer["tool_calls"] = [
            {
                "id": call.id or f"call_{call_index}_{index}",
                "type": "function",
                "function": {"name": call.function.name, "arguments": _json_object(call.function.arguments)},
            }
            for index, call in enumerate(calls)
        ]
    return answer


def assistant_message(answer: dict[str, Any]) -> Message:
    """An OpenAI-style assistant message (an endpoint's answer) as the renderer's `Message`."""
    message = Message(role="assistant", content=_text(answer.get("content")))
    calls = [
        ToolCall(
            function=ToolCall.FunctionBody(
                name=str((call.get("function") or {}).get("name")),
                arguments=str((call.get("function") or {}).get("arguments") or "{}"),
            ),
            id=call.get("id"),
        )
        for call in answer.get("tool_calls") or []
    ]
    if calls:
        message["tool_calls"] = calls
    return message


@dataclass
class ModelResponder:
    """An endpoint `Responder` sampling the run's model under `limits` (its generation and
    trajectory limits) and the episode's `scoring` rule; `calls` records each call."""

    policy: TokenCompleter
    renderer: renderers.Renderer
    limits: Any
    scoring: ScoringRule
    calls: list[SampledCall] = field(default_factory=list)
    observations: Observations | None = None
    view: ModelView = field(default_factory=lambda: ModelView())

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.observations is None:
            self.observations = Observations(self.renderer)
        self.view.request(body)
        stop = self.renderer.get_stop_sequences()
        extra: list[Message] = []
        while True:
            model_input = self.observations.observe(body, extra)
            ending = self.scoring.overflow(model_input.length, self.limits, first=not self.calls)
            if ending is not None:
                raise LimitReached(ending)
            sampled = await self.policy(model_input, stop, max_tokens=self.limits.max_generation_tokens)
            tokens = list(sampled.tokens)
            stop_reason = str(getattr(sampled, "stop_reason", "stop"))
            self.calls.append(
                SampledCall(
                    prompt_tokens=model_input.to_ints(),
                    sampled_tokens=tokens,
                    logprobs=list(sampled.maybe_logprobs) if sampled.maybe_logprobs is not None else None,
                    stop_reason=stop_reason,
                )
            )
            message, _ = self.renderer.parse_response(tokens)
            if stop_reason == "length":
                self.view.unsent(message, CUT)
                raise LimitReached(self.scoring.end(MAX_TOKENS))  # a turn cut before its end
            verdict = self.scoring.judge(message)
            if verdict is None:
                answer = answer_message(self.renderer, tokens, len(self.calls))
                message = assistant_message(answer)
                self.observations.answered(tokens, message)
                self.view.answer(message)
                return answer
            self.observations.answered(tokens, message)
            if not verdict.retry:
                self.view.unsent(message, UNPARSED)
                raise LimitReached(PARSE_ERROR)
            extra += retry_messages(message, verdict.message)
            self.view.retry(message, verdict.message)


def _json_object(arguments: str) -> str:
    """The call's arguments as the model wrote them when they are a JSON object; else an
    object holding them, so Pi reports the bad call to the model instead of failing."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return json.dumps({"_raw_arguments": arguments})
    return arguments if isinstance(value, dict) else json.dumps({"_raw_arguments": arguments})
