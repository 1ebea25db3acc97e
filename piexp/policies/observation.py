"""What a scripted policy knows: only what the model would see.

A scripted policy receives the same `tinker.ModelInput` a sampled model receives. It
decodes those tokens back to text and reads from it the workspace prompt (language,
instruction, file list, file to write, exact command) and the tool results so far. No
state is kept between calls: the observation alone says where the episode stands, so
one policy object serves any number of concurrent episodes (k samples of the same task
share a prompt prefix, so keying state by prefix would mix them up).

Parsing is renderer-agnostic on purpose: the prompt is found by its own wording (fixed by
`piexp.env.prompt`) and tool results by their JSON schema tag (fixed by
`piexp.env.tools.RESULT_SCHEMA`), not by any chat-template markup.
"""

from __future__ import annotations

import json
import re
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


def decode_model_input(renderer: renderers.Renderer, model_input: tinker.ModelInput) -> str:
    """The text of the prompt tokens. Special tokens are kept: they are only markup.

    piexp's thread-safe tokenizer exposes its Rust backend and lock; decoding there
    skips transformers' per-token Python conversion, which made decoding the policy's
    largest cost (about 1.5 ms per turn at 4k tokens, against 0.1 ms).
    """
    ids = model_input.to_ints()
    tokenizer = renderer.tokenizer
    unwrapped, lock = getattr(tokenizer, "unwrapped", None), getattr(tokenizer, "lock", None)
    backend = getattr(unwrapped, "backend_tokenizer", None)
    if backend is not None and lock is not None:
        with lock:
            return backend.decode(ids, skip_special_tokens=False)
    return tokenizer.decode(ids, skip_special_tokens=False)


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
