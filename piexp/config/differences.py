"""Which keys of two configs differ, as `key: old -> new` lines: what a refusal to
reproduce a run, or to run into a folder that holds another run, names."""

from __future__ import annotations

from typing import Any

# The keys that name a section's variant: `name` (mode, service), `kind` (sandbox).
_TAGS = ("name", "kind")


def config_differences(
    saved: dict[str, Any], recomposed: dict[str, Any], ignore: frozenset[str] = frozenset({"reproduces"})
) -> list[str]:
    """Dotted keys whose values differ, as `key: saved -> now` (a section present on one
    side only is one line, `family.dates: (absent) -> {...}`); keys in `ignore`, and those
    below them, are not compared (by default the `reproduces` record itself, which is not
    part of what is reproduced)."""
    lines: list[str] = []

    def show(value: Any) -> str:
        return "{...}" if isinstance(value, dict) else repr(value)

    def walk(a: dict[str, Any], b: dict[str, Any], prefix: str) -> None:
        for key in sorted(set(a) | set(b), key=str):
            dotted = f"{prefix}{key}"
            if any(dotted == name or dotted.startswith(f"{name}.") for name in ignore):
                continue
            left, right = a.get(key, ...), b.get(key, ...)
            tag = next((tag for tag in _TAGS if isinstance(left, dict) and tag in left), "name")
            if isinstance(left, dict) and isinstance(right, dict) and left.get(tag) != right.get(tag):
                # Another variant of a section (mode=eval vs mode=train, sandbox=remote vs
                # sandbox=embedded): its tag says it all.
                lines.append(f"{dotted}.{tag}: {left.get(tag)!r} -> {right.get(tag)!r} (another {key})")
            elif isinstance(left, dict) and isinstance(right, dict):
                walk(left, right, f"{dotted}.")
            elif left != right:
                lines.append(
                    f"{dotted}: {'(absent)' if left is ... else show(left)} -> "
                    f"{'(absent)' if right is ... else show(right)}"
                )

    walk(saved, recomposed, "")
    return lines


def shown(differences: list[str], at_most: int = 5) -> str:
    """The first few differences on one line."""
    more = len(differences) - at_most
    return "; ".join(differences[:at_most]) + (f"; and {more} more" if more > 0 else "")
