"""Every built-in family declares its difficulty (which parameters make
it harder, levels 1..L within the parameter bounds, each level at least as hard as the
one before), a user's family declares it through the same `Family(difficulty=...)`, bad
declarations are refused when the family is defined, bad levels when they are asked for,
and `tasks --params` shows the scale."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import pytest

from piexp.errors import UserError
from piexp.tasks import FAMILIES, Difficulty, Family, FamilyDefinitionError, build_tasks
from piexp.tasks.difficulty import parse_levels
from piexp.tasks.params_help import render_params_help


@dataclass(frozen=True)
class _Params:
    n_numbers: int = 10  # lines in numbers.txt
    max_value: int = 100  # numbers are drawn from 1..max_value


def _generate(rng: random.Random, p: _Params):
    numbers = [rng.randint(1, p.max_value) for _ in range(p.n_numbers)]
    return "Sum them.", {"numbers.txt": "\n".join(map(str, numbers)) + "\n"}, sum(numbers), {}


def _family(difficulty: Difficulty | None) -> Family:
    return Family(
        name="summing",
        summary="a sum",
        params_type=_Params,
        limits={"n_numbers": (1, 50), "max_value": (1, 1000)},
        generate=_generate,
        difficulty=difficulty,
    )


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_builtin_families_declare_a_scale_within_bounds(name: str) -> None:
    family = FAMILIES[name]
    assert family.difficulty is not None and family.difficulty.count >= 3
    defaults = dataclasses.asdict(family.defaults)
    for level in range(1, family.difficulty.count + 1):
        values = family.level_params(level)
        for param, value in values.items():
            low, high = family.limits[param]
            assert low <= value <= high
        # The level builds real tasks; easier levels have (weakly) smaller workspaces.
        (task,) = build_tasks("eval", 1, 0, [name], {name: values})
        assert task.params[next(iter(values))] == values[next(iter(values))]
    assert {k: defaults[k] for k in family.level_params(3)} == family.level_params(3)  # level 3: the defaults
    easiest = build_tasks("eval", 3, 0, [name], {name: family.level_params(1)})
    hardest = build_tasks("eval", 3, 0, [name], {name: family.level_params(family.difficulty.count)})
    size = lambda tasks: sum(len(text) for task in tasks for text in task.files.values())  # noqa: E731
    assert size(easiest) < size(hardest)


def test_a_user_family_declares_difficulty_and_levels_are_checked() -> None:
    family = _family(Difficulty(harder={"n_numbers": 1, "max_value": 1}, levels=({"n_numbers": 2, "max_value": 9},
                                                                                 {"n_numbers": 20, "max_value": 900})))  # fmt: skip
    assert family.level_params(2) == {"n_numbers": 20, "max_value": 900}
    for bad in (0, 3, -1):
        with pytest.raises(UserError, match=r"levels 1\.\.2"):
            family.level_params(bad)
    with pytest.raises(UserError, match="declares no difficulty"):
        _family(None).level_params(1)


@pytest.mark.parametrize(
    ("difficulty", "message"),
    [
        (
            Difficulty(harder={"n_numbers": 1}, levels=({"n_numbers": 2}, {"n_numbers": 60})),
            r"outside its bounds \[1, 50\]",
        ),
        (Difficulty(harder={"n_numbers": 1}, levels=({"n_numbers": 20}, {"n_numbers": 5})), "easier than level 1"),
        (Difficulty(harder={"n_numbers": -1}, levels=({"n_numbers": 2}, {"n_numbers": 5})), "easier than level 1"),
        (Difficulty(harder={"n_numbers": 1}, levels=({"n_numbers": 2}, {"n_numbers": 2})), "same setting"),
        (Difficulty(harder={"size": 1}, levels=({"size": 2},)), "does not have"),
        (Difficulty(harder={"n_numbers": 2}, levels=({"n_numbers": 2},)), r"must be \+1 or -1"),
        (Difficulty(harder={"n_numbers": 1}, levels=()), "at least one level"),
        (Difficulty(harder={"n_numbers": 1}, levels=({"max_value": 2},)), "must set exactly n_numbers"),
    ],
)
def test_bad_declarations_are_refused_at_definition(difficulty: Difficulty, message: str) -> None:
    with pytest.raises(FamilyDefinitionError, match=message):
        _family(difficulty)


def test_a_level_failing_the_params_check_is_refused() -> None:
    arith = FAMILIES["arith"]
    with pytest.raises(FamilyDefinitionError, match="level 1: .*must be prime"):
        dataclasses.replace(arith, difficulty=Difficulty(harder={"modulus": 1}, levels=({"modulus": 10},)))


def test_level_lists_parse_and_refuse_levels_outside_the_scale() -> None:
    assert parse_levels("arith", 5, "all") == [1, 2, 3, 4, 5]
    assert parse_levels("arith", 5, "2-4") == [2, 3, 4]
    assert parse_levels("arith", 5, "5,1") == [1, 5]
    for bad in ("0-2", "6", "x", "3-"):
        with pytest.raises(UserError, match="levels="):
            parse_levels("arith", 5, bad)


def test_params_help_shows_the_scale() -> None:
    text = render_params_help(FAMILIES["arith"])
    assert "harder with larger n_expressions, larger max_depth, larger max_literal; levels 1..5" in text
    assert "| 1 | 20 | 1 | 9 |" in text and "| 5 | 280 | 4 | 9999 |" in text
    assert "Difficulty: not declared" in render_params_help(_family(None))
