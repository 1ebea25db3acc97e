"""What a scripted policy knows: only what the model would see.

A scripted policy receives the same `tinker.ModelInput` a sampled model receives. It
decodes those tokens back to text and reads from it the workspace prompt (language,
instruction, file list, file to write, exact command) and the tool results so far. No
episode state is kept between calls: the observation alone says where the episode
stands, so one policy object serves any number of concurrent episodes (k samples of the
same task share a prompt prefix, so keying state by prefix would mix them up). The only
thing remembered is a pure memo of decoded text (`DecodeCache`): each turn's input
extends the previous one, so only the new suffix is decoded.

Parsing is renderer-agnostic on purpose: the prompt is found by its own wording (fixed by
`piexp.env.prompt`) and tool results by their JSON schema tag (fixed by
`piexp.env.tools.RESULT_SCHEMA`), not by any chat-template markup.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tinker
from tinker_cookbook import renderers

from piexp.env.tools import RESULT_SCHEMA

# Mirrors piexp.env.prompt.workspace_prompt; the tests pin the two together by running
# real episodes, so a wording change there fails loudly here.
_PROMPT = re.compile(
    r"Use (?P<language>\S+) to complete this workspace task\.\n\n"
    r"(?P<instruction>.*?)\n\n"
    r"Available files:\n(?P<files>(?:- `[^`\n]+`\n?)*)\n"
    r"Use the file tools to inspect inputs and write `(?P<filename>[^`\n]+)`\. "
    r"Execute it with exactly `(?P<command>[^`\n]+)`\.",
    re.DOTALL,
)
_FILE_ITEM = re.compile(r"^- `([^`\n]+)`$", re.MULTILINE)
_JSON_START = re.compile(r'\{"')
_INTEGER_LINE = re.compile(r"^-?\d+$")


class ObservationError(ValueError):
    """The model input does not hold a workspace prompt: the policy was given another env."""


@dataclass(frozen=True)
class Observation:
    language: str
    instruction: str
    files: tuple[str, ...]
    filename: str
    command: str
    results: tuple[dict[str, Any], ...]  # tool results so far, oldest first

    def bash_results(self) -> list[dict[str, Any]]:
        return [result for result in self.results if result.get("tool") == "bash"]


class DecodeCache:
    """Remembers the decoded text of recent model inputs, so that an input extending one
    of them (the next turn of the same conversation) decodes only its new tokens.

    A pure memo: the text returned is exactly what decoding all the tokens gives. Byte-
    level BPE decoding is byte concatenation, so decode(prefix + suffix) equals
    decode(prefix) + decode(suffix) whenever the split falls between whole UTF-8
    characters; a split that might not (the prefix's text ends, or the suffix's text
    starts, with U+FFFD, the replacement for a partial character) falls back to decoding
    everything. Bounded by entries and by total tokens held; thread-safe.
    """

    def __init__(self, max_entries: int = 32, max_tokens: int = 1_000_000) -> None:
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, tuple[list[int], str]] = OrderedDict()
        self._tokens = 0
        self._next_key = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest_prefix(self, ids: list[int]) -> tuple[list[int], str] | None:
        """The longest remembered input that is a proper prefix of `ids`, and its text."""
        n = len(ids)
        best: tuple[int, list[int], str] | None = None
        with self._lock:
            for key, (prefix, text) in self._entries.items():
                m = len(prefix)
                if not 0 < m < n or (best is not None and m <= len(best[1])):
                    continue
                # Cheap probes first, then the exact comparison. Inputs share a system
                # prompt and end with the same generation prompt, so probe the last
                # message's text, just before that: where conversations differ most.
                a, b, c = max(m - 16, 0), max(m - 48, 0), (m * 7) // 8
                if ids[a] == prefix[a] and ids[b] == prefix[b] and ids[c] == prefix[c] and ids[:m] == prefix:
                    best = (key, prefix, text)
            if best is None:
                self.misses += 1
                return None
            self._entries.move_to_end(best[0])
            self.hits += 1
        return best[1], best[2]

    def put(self, ids: list[int], text: str) -> None:
        if not ids or len(ids) > self.max_tokens or self.max_entries <= 0:
            return
        with self._lock:
            self._entries[self._next_key] = (ids, text)
            self._next_key += 1
            self._tokens += len(ids)
            while self._entries and (len(self._entries) > self.max_entries or self._tokens > self.max_tokens):
                _, (old, _text) = self._entries.popitem(last=False)
                self._tokens -= len(old)

    def decode(self, ids: list[int], decode_all: Callable[[list[int]], str]) -> str:
        """The text of `ids`; `decode_all(ids)` decodes a token list from scratch."""
        found = self.longest_prefix(ids)
        text = None
        if found is not None:
            prefix, prefix_text = found
            if not prefix_text.endswith("\ufffd"):
                suffix_text = decode_all(ids[len(prefix) :])
                if not suffix_text.startswith("\ufffd"):
                    text = prefix_text + suffix_text
        if text is None:
            text = decode_all(ids)
        self.put(list(ids), text)
        return text


def decode_model_input(
    renderer: renderers.Renderer,
    model_input: tinker.ModelInput,
    cache: DecodeCache | None = None,
) -> str:
    """The text of the prompt tokens. Special tokens are kept: they are only markup.

    piexp's thread-safe tokenizer exposes its Rust backend and lock; decoding there
    skips transformers' per-token Python conversion, which made decoding the policy's
    largest cost (about 1.5 ms per turn at 4k tokens, against 0.1 ms). With a `cache`,
    an input that extends a recent one decodes only its new tokens.
    """
    ids = model_input.to_ints()
    tokenizer = renderer.tokenizer
    unwrapped, lock = getattr(tokenizer, "unwrapped", None), getattr(tokenizer, "lock", None)
    backend = getattr(unwrapped, "backend_tokenizer", None)
    if backend is not None and lock is not None:

        def decode_all(tokens: list[int]) -> str:
            with lock:
                return backend.decode(tokens, skip_special_tokens=False)

    else:

        def decode_all(tokens: list[int]) -> str:
            text = tokenizer.decode(tokens, skip_special_tokens=False)
            assert isinstance(text, str)  # one flat token list decodes to one string
            return text

    if cache is None:
        return decode_all(ids)
    return cache.decode(ids, decode_all)


def parse_observation(text: str) -> Observation:
    match = _PROMPT.search(text)
    if match is None:
        raise ObservationError(
            "no workspace prompt in the model input (expected 'Use <language> to complete "
            "this workspace task.'); scripted policies only drive piexp workspace episodes"
        )
    return Observation(
        language=match["language"],
        instruction=match["instruction"],
        files=tuple(_FILE_ITEM.findall(match["files"])),
        filename=match["filename"],
        command=match["command"],
        results=tuple(tool_results(text, start=match.end())),
    )


def tool_results(text: str, start: int = 0) -> list[dict[str, Any]]:
    """Every JSON object tagged with the tool-result schema after `start`, in order.

    Tool calls (the assistant's own JSON) are parsed and skipped; string contents are
    JSON-escaped, so a `{"` inside a file or a program never starts a false match.
    """
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    position = start
    while True:
        match = _JSON_START.search(text, position)
        if match is None:
            return found
        try:
            value, end = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            position = match.start() + 1
            continue
        if isinstance(value, dict) and value.get("schema") == RESULT_SCHEMA:
            found.append(value)
            position = end
        else:
            position = match.start() + 1


def printed_integer(result: dict[str, Any]) -> str | None:
    """The integer on the last non-empty stdout line of a bash result, if it is one."""
    lines = [line.strip() for line in str(result.get("stdout") or "").splitlines() if line.strip()]
    if lines and _INTEGER_LINE.match(lines[-1]):
        return lines[-1]
    return None
