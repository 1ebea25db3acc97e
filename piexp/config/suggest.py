"""Errors that name the fix: the closest valid names for a mistyped key, option, family,
language or subcommand, and the key a bare name most likely meant (`preflight` is
`mode.preflight`)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence

from piexp.errors import UserError


def did_you_mean(word: str, candidates: Iterable[str], *, at_most: int = 3) -> str:
    """` Did you mean X?` (or `X or Y`) for the closest candidates, else an empty string."""
    names = list(dict.fromkeys(candidates))
    close = difflib.get_close_matches(word, names, n=at_most, cutoff=0.6)
    if not close:
        lowered = {name.lower(): name for name in names}
        close = [lowered[w] for w in difflib.get_close_matches(word.lower(), list(lowered), n=at_most, cutoff=0.6)]
    return f" Did you mean {' or '.join(close)}?" if close else ""


def did_you_mean_aside(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest candidates, else an empty string."""
    guess = did_you_mean(word, candidates).strip()
    return f" ({guess[0].lower()}{guess[1:]})" if guess else ""


def refuse_unknown_subcommand(argv: Sequence[str], subcommands: Iterable[str]) -> None:
    """A first word that is neither an override, a flag nor a subcommand is a mistyped
    subcommand (Hydra would call it an unparsable override)."""
    if not argv:
        return
    first = argv[0]
    if first.startswith("-") or "=" in first or first.startswith(("+", "~")):
        return
    names = list(subcommands)
    raise UserError(
        f"Unknown subcommand {first!r}.{did_you_mean(first, names)} Subcommands: {', '.join(names)}; "
        "anything else on the command line is a KEY=VALUE override (python -m piexp --help)."
    )


def config_keys(tree: Mapping, prefix: str = "") -> list[str]:
    """Every dotted key of a composed config (group nodes and leaves)."""
    keys: list[str] = []
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        if isinstance(value, Mapping):
            keys.extend(config_keys(value, f"{dotted}."))
    return keys


def unknown_key_hint(key: str, keys: Sequence[str], selected_families: Sequence[str]) -> str:
    """Why `key` cannot be overridden and what was likely meant."""
    from piexp.tasks import FAMILIES

    parts = key.split(".")
    if parts[0] == "family" and len(parts) > 1 and parts[1] in FAMILIES and parts[1] not in selected_families:
        chosen = ",".join(selected_families) or "none"
        return (
            f" Family {parts[1]} is not selected (family={chosen}); select it too, e.g. "
            f"family={chosen},{parts[1]} {key}=..."
        )
    last = parts[-1]
    same_leaf = [candidate for candidate in keys if candidate.split(".")[-1] == last and candidate != key]
    if same_leaf:
        return f" Did you mean {' or '.join(same_leaf[:3])}?"
    return did_you_mean(key, keys)


def other_mode_hint(key: str, current_mode: str, keys_by_mode: Mapping[str, Sequence[str]], group: str = "mode") -> str:
    """The refusal of `key`, an option of other options of `group` than `current_mode`
    (`mode.max_steps` is a train option, `service.tcmalloc` a local one): which take it,
    and the fix (empty when none takes it)."""
    takers = [mode for mode, keys in keys_by_mode.items() if mode != current_mode and key in keys]
    if not takers or key in keys_by_mode.get(current_mode, ()):
        return ""
    named = " or ".join(f"{group}={mode}" for mode in takers)
    if group == "mode":
        return (
            f"{key} is a {named} option; this command line runs mode={current_mode}, which does not take it. "
            f"Add {named} to run that mode, or drop {key}."
        )
    return (
        f"{key} is not a setting of {group}={current_mode}: it is a {named} "
        f"option. Add {named} to use that {group}, or drop {key}."
    )


def unknown_options_hint(group: str, value: str, options: Sequence[str]) -> str:
    """The items of a group choice (`family=arith,graphs`) that are not options, each with
    its closest options."""
    if not value.strip():
        return f"{group}= is empty; give one of: {', '.join(options)}."
    items = [item.strip() for item in value.strip("[]").split(",")]
    bad = [item for item in items if item not in options] or items
    named = ", ".join(f"{item}{did_you_mean_aside(item, options)}" for item in bad)
    return f"Unknown {group} option {named}. Valid {group} options: {', '.join(options)}."
