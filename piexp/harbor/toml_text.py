"""TOML text for the little piexp writes (task.toml, dataset.toml): the standard library
reads TOML but does not write it. Strings are written as JSON strings with ASCII escapes,
which TOML reads as the same basic strings, so one value has one spelling on every
machine (a Harbor digest covers these files' bytes)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any


def value_text(value: Any) -> str:
    """One TOML value: strings, booleans, integers, finite floats, arrays, inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"TOML holds no non-finite number here: {value!r}")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=True)
    if isinstance(value, Mapping):
        items = ", ".join(f"{key_text(key)} = {value_text(item)}" for key, item in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(value_text(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def key_text(key: str) -> str:
    """A bare key where TOML allows one, else a quoted one."""
    if key and all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in key):
        return key
    return json.dumps(key, ensure_ascii=True)


def table_text(name: str, entries: Mapping[str, Any], *, array: bool = False) -> str:
    """`[name]` (or `[[name]]`) and one `key = value` line per entry."""
    header = f"[[{name}]]" if array else f"[{name}]"
    lines = [header, *(f"{key_text(key)} = {value_text(value)}" for key, value in entries.items())]
    return "\n".join(lines) + "\n"
