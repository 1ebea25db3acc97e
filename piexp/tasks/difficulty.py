"""A family's declared difficulty: which of its parameters make its tasks harder and in
which direction (`harder`: +1 when a larger value is harder, -1 when a smaller one is),
and a scale of levels 1..L, each a setting of exactly those parameters, easiest first.
The declaration is checked when the family is defined (every level within the parameter
bounds, passing the family's own params check, and each level at least as hard as the one
before in every declared direction, harder in one), so a bad scale never reaches a run;
`python -m piexp calibrate` walks the levels, and `tasks --params` shows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from piexp.errors import UserError


@dataclass(frozen=True)
class Difficulty:
    # parameter -> +1 (a larger value is harder) or -1 (a smaller value is harder)
    harder: Mapping[str, int]
    # level 1..L (easiest first) -> the value of every parameter in `harder`
    levels: Sequence[Mapping[str, int]] = field(default_factory=tuple)

    @property
    def count(self) -> int:
        return len(self.levels)

    def problems(self, names: Sequence[str], limits: Mapping[str, tuple[int, int]]) -> list[str]:
        """What is wrong with this declaration for a family with these parameters (empty: fine)."""
        problems: list[str] = []
        unknown = sorted(set(self.harder) - set(names))
        if unknown:
            problems.append(f"difficulty names parameter(s) {', '.join(unknown)} the family does not have")
        bad_direction = sorted(name for name, sign in self.harder.items() if sign not in (1, -1))
        if bad_direction:
            problems.append(f"difficulty direction of {', '.join(bad_direction)} must be +1 or -1")
        if not self.harder:
            problems.append("difficulty must name at least one parameter in `harder`")
        if not self.levels:
            problems.append("difficulty needs at least one level")
        if problems:
            return problems
        for number, level in enumerate(self.levels, start=1):
            if set(level) != set(self.harder):
                problems.append(f"level {number} must set exactly {', '.join(sorted(self.harder))}")
                continue
            for name, value in level.items():
                low, high = limits[name]
                if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                    problems.append(f"level {number}: {name}={value!r} is outside its bounds [{low}, {high}]")
        if problems:
            return problems
        for number in range(2, len(self.levels) + 1):
            before, after = self.levels[number - 2], self.levels[number - 1]
            easier = [n for n, sign in self.harder.items() if (after[n] - before[n]) * sign < 0]
            if easier:
                problems.append(f"level {number} is easier than level {number - 1} in {', '.join(sorted(easier))}")
            elif all(after[n] == before[n] for n in self.harder):
                problems.append(f"level {number} is the same setting as level {number - 1}")
        return problems

    def params(self, family: str, level: int) -> dict[str, int]:
        """The parameter values of `level` (1-based); any other level is refused."""
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= len(self.levels):
            raise UserError(
                f"family {family!r} has difficulty levels 1..{len(self.levels)}; level {level!r} is not one"
            )
        return dict(self.levels[level - 1])

    def describe(self) -> dict[str, Any]:
        """A plain-data view (for calibration.json and the `--params` table)."""
        return {
            "harder": {name: "larger" if sign > 0 else "smaller" for name, sign in self.harder.items()},
            "levels": [dict(level) for level in self.levels],
        }


def parse_levels(family: str, count: int, text: str) -> list[int]:
    """`levels=2-4` or `levels=1,3,5` (or `all`) -> level numbers, each within 1..count."""
    text = text.strip()
    if text in ("", "all"):
        return list(range(1, count + 1))
    chosen: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                low, high = (int(bound) for bound in part.split("-", 1))
                chosen += list(range(low, high + 1))
            else:
                chosen.append(int(part))
    except ValueError:
        raise UserError(f"levels={text!r} is not a level list like 1-3 or 1,3,5") from None
    outside = [level for level in chosen if not 1 <= level <= count]
    if outside or not chosen:
        raise UserError(
            f"levels={text!r}: family {family!r} has difficulty levels 1..{count}"
            + (f"; {', '.join(map(str, outside))} is not one" if outside else "")
        )
    return sorted(set(chosen))
