"""The language registry: the one place that says which languages piexp knows and the
facts about each that code relies on (the extension of its source files, the id the
sandbox protocol runs it under, how it prints a line and raises an error). Every layer
reads languages through `LANGUAGES` / `language()`; the user's choices about a language
(the commands `bash` accepts, the solution file name) stay in `conf/languages/*.yaml`,
whose names must be registry names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from piexp.errors import UserError


@dataclass(frozen=True)
class Language:
    """One language piexp can run; the name is what configs, tasks and records say."""

    name: str
    # Source-file extensions, without the dot; the first is the one piexp writes
    # (reference programs in tasks/families/refs/, the copied reference of `wrong`).
    extensions: tuple[str, ...]
    # SandboxFusion's `/run_code` language id (piexp says `javascript`, SandboxFusion `nodejs`).
    sandbox_id: str
    # A statement printing one string literal, and one raising an error with a message;
    # `{}` is replaced by a JSON string literal, which all three languages read the same.
    print_template: str
    raise_template: str
    # A public image whose tag fixes the runtime's version (Harbor tasks' environment).
    base_image: str

    @property
    def extension(self) -> str:
        return self.extensions[0]

    def print_statement(self, text: str) -> str:
        """A one-line program printing `text` (text without `$`, which Julia interpolates)."""
        return self.print_template.format(json.dumps(text)) + "\n"

    def raise_statement(self, message: str) -> str:
        """A one-line program that fails at once with `message` (exit code != 0)."""
        return self.raise_template.format(json.dumps(message)) + "\n"


LANGUAGES: Mapping[str, Language] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            Language("python", ("py",), "python", "print({})", "raise RuntimeError({})", "python:3.12-slim"),
            Language("javascript", ("js", "mjs"), "nodejs", "console.log({});", "throw new Error({});", "node:22-slim"),
            Language("julia", ("jl",), "julia", "println({})", "error({})", "julia:1.11"),
        )
    }
)


def language(name: str) -> Language:
    """The registry entry for `name`; an unknown name is a user error naming the valid ones."""
    try:
        return LANGUAGES[name]
    except KeyError:
        raise UserError(f"unknown language {name!r}; valid languages: {', '.join(LANGUAGES)}") from None


def language_of_path(path: str) -> Language | None:
    """The language a source file is written in, from its extension (None: not a known one)."""
    extension = path.rpartition(".")[2] if "." in path else ""
    return next((spec for spec in LANGUAGES.values() if extension in spec.extensions), None)
