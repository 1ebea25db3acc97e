"""What a task family is: a name, difficulty params with defaults and limits, a generator,
and three reference programs stored as real source files in ``families/refs/``.

Limits on params are not cosmetic: they are what keeps every answer and intermediate
within +/-2^53 and the workspace small enough for a prompt, so overrides outside them are
refused rather than silently producing tasks the languages disagree on.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.languages import language as registered_language

REFS_DIR = Path(__file__).resolve().parent / "families" / "refs"

# generate(rng, params) -> (instruction, files, answer, params_used)
Generator = Callable[[random.Random, Any], tuple[str, dict[str, str], int, dict[str, Any]]]


@dataclass(frozen=True)
class Family:
    name: str
    summary: str
    params_type: type
    # field name -> (min, max) inclusive; every field must have one.
    limits: Mapping[str, tuple[int, int]]
    generate: Generator

    def __post_init__(self) -> None:
        names = {f.name for f in dataclasses.fields(self.params_type)}
        if names != set(self.limits):
            raise TypeError(f"{self.name}: limits must cover exactly {sorted(names)}")

    @property
    def defaults(self) -> Any:
        return self.params_type()

    def param_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.params_type))

    def make_params(self, overrides: Mapping[str, Any] | None = None) -> Any:
        """Defaults updated by ``overrides``; unknown keys and out-of-range values are refused."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.param_names()))
        if unknown:
            raise UserError(
                f"family {self.name!r} has no parameter(s) {', '.join(unknown)}; "
                f"its parameters are: {', '.join(self.param_names())}"
            )
        params = dataclasses.replace(self.defaults, **overrides)
        for name in self.param_names():
            value = getattr(params, name)
            low, high = self.limits[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise UserError(f"family {self.name!r}: {name} must be an integer, got {value!r}")
            if not low <= value <= high:
                raise UserError(
                    f"family {self.name!r}: {name}={value} is outside [{low}, {high}] "
                    "(the limits keep answers exact in every language and workspaces prompt-sized)"
                )
        check = getattr(params, "check", None)
        if check is not None:
            problem = check()
            if problem:
                raise UserError(f"family {self.name!r}: {problem}")
        return params

    def reference(self, language: str) -> str:
        """Source of the reference program in `language` (a registry name)."""
        return _read_reference(self.name, registered_language(language).extension)


@cache
def _read_reference(name: str, ext: str) -> str:
    return (REFS_DIR / f"{name}.{ext}").read_text(encoding="utf-8")


def check_exact(family: str, *values: int) -> None:
    """Generator-side guard: refuse (as a bug) any value JavaScript could not hold exactly."""
    for value in values:
        if not -(2**53) < value < 2**53:
            raise AssertionError(f"{family}: value {value} exceeds +/-2^53")
