"""Which keys of two configs differ, as `key: old -> new` lines: what a refusal to
reproduce a run, or to run into a folder that holds another run, names."""

from __future__ import annotations

from typing import Any


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (`mode.preflight`) to leaf values."""
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): data}


def config_differences(
    saved: dict[str, Any], recomposed: dict[str, Any], ignore: frozenset[str] = frozenset({"reproduces"})
) -> list[str]:
    """Dotted keys whose values differ, as `key: saved -> now`; keys in `ignore`, and
    those below them, are not compared (by default the `reproduces` record itself, which
    is not part of what is reproduced)."""
    def kept(key: str) -> bool:
        return not any(key == name or key.startswith(f"{name}.") for name in ignore)

    a = {k: v for k, v in flatten(saved).items() if kept(k)}
    b = {k: v for k, v in flatten(recomposed).items() if kept(k)}
    return [f"{key}: {a.get(key, '(absent)')!r} -> {b.get(key, '(absent)')!r}"
            for key in sorted(set(a) | set(b)) if a.get(key, ...) != b.get(key, ...)]


def shown(differences: list[str], at_most: int = 5) -> str:
    """The first few differences on one line."""
    return "; ".join(differences[:at_most]) + ("; ..." if len(differences) > at_most else "")
