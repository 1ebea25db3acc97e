"""arith: a file of integer expressions (precedence, parentheses) whose values are combined.

Needs a program because there are ~150 expressions with nested parentheses; the answer
also exercises floor-modulo of negatives, which Python, JavaScript and Julia spell
differently, so the instruction defines it. The answer comes from Python's own parser
(``ast``) applied to each rendered line, checked against the value of the tree that line
was rendered from; the references parse by recursive descent instead.
"""

from __future__ import annotations

import ast
import operator
import random
from dataclasses import dataclass

from piexp.tasks.families._common import query_file
from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact

BOUND = 10**12  # every node of every expression stays within +/-BOUND (<< 2^53)
PREC = {"+": 1, "-": 1, "*": 2}


@dataclass(frozen=True)
class ArithParams:
    n_expressions: int = 150  # lines in expressions.txt
    max_depth: int = 3  # maximum nesting depth of an expression tree
    max_literal: int = 99  # literals are drawn from 0..max_literal
    modulus: int = 997  # prime used for the floor remainder of each value

    def check(self) -> str | None:
        if any(self.modulus % d == 0 for d in range(2, int(self.modulus**0.5) + 1)):
            return f"modulus={self.modulus} must be prime"
        return None


# The only operators an expression line may contain, as Python's parser names them.
AST_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _parsed_value(text: str) -> int:
    """Value of one expression line as Python's own grammar reads it (same precedence rules)."""

    def value(node: ast.expr) -> int:
        if isinstance(node, ast.BinOp) and type(node.op) in AST_OPERATORS:
            return AST_OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        raise AssertionError(f"arith: unexpected {ast.dump(node)} in {text!r}")

    return value(ast.parse(text, mode="eval").body)


def _gen(rng: random.Random, depth: int, p: ArithParams) -> tuple[str, int, int]:
    """Returns (text, value, precedence); precedence 3 means atomic (literal or parenthesized)."""
    if depth == 0 or rng.random() < 0.25:
        value = rng.randint(0, p.max_literal)
        return str(value), value, 3
    op = rng.choice("+-*")
    lt, lv, lp = _gen(rng, depth - 1, p)
    rt, rv, rp = _gen(rng, depth - 1, p)
    if lp < PREC[op]:
        lt = f"({lt})"
    # Equal precedence on the right is always parenthesized, so a - (b - c) keeps its meaning
    # and left-to-right evaluation never produces an intermediate the tree does not have.
    if rp <= PREC[op]:
        rt = f"({rt})"
    value = lv + rv if op == "+" else lv - rv if op == "-" else lv * rv
    if abs(value) > BOUND:
        raise OverflowError
    sep = " " if rng.random() < 0.6 else ""
    text = f"{lt}{sep}{op}{sep}{rt}"
    if rng.random() < 0.1:
        return f"({text})", value, 3
    return text, value, PREC[op]


def generate(rng: random.Random, p: ArithParams):
    lines: list[str] = []
    tree_values: list[int] = []  # values of the generated trees, a check on the parsed ones
    while len(lines) < p.n_expressions:
        try:
            text, value, _ = _gen(rng, p.max_depth, p)
        except OverflowError:
            continue  # redraw: an intermediate left the exact range
        lines.append(text)
        tree_values.append(value)
    values = [_parsed_value(text) for text in lines]
    for text, parsed, value in zip(lines, values, tree_values):
        if parsed != value:
            raise AssertionError(f"arith: {text!r} reads as {parsed}, but its tree is worth {value}")
    m = p.modulus
    answer = sum(i * (v % m) for i, v in enumerate(values, start=1))
    check_exact("arith", answer, *values)
    instruction = (
        "Each line of `expressions.txt` is an integer expression built from non-negative "
        "integer literals, the binary operators `+`, `-` and `*`, and parentheses. The usual "
        "precedence applies: `*` binds tighter than `+` and `-`, and operators of equal "
        "precedence associate left to right. There is no division and no unary minus. "
        f"Every value, including every intermediate result, lies within +/-{BOUND}.\n"
        "Number the lines from 1. Let v_i be the value of line i and let "
        f"r_i = v_i mod {m}, the floor remainder, which is always in 0..{m - 1} even when "
        f"v_i is negative (for example -5 mod {m} = {-5 % m}).\n"
        "The answer is the sum of i * r_i over all lines. Print it as a decimal integer.\n"
        f"The modulus is also given in `query.txt` as `modulus={m}`."
    )
    files = {"expressions.txt": "\n".join(lines) + "\n", "query.txt": query_file(modulus=m)}
    return instruction, files, answer, {"modulus": m}


FAMILY = Family(
    name="arith",
    summary="integer expressions with precedence and parentheses, combined with floor-mod",
    params_type=ArithParams,
    limits={
        "n_expressions": (10, 400),
        "max_depth": (1, 6),
        "max_literal": (1, 9999),
        "modulus": (2, 1_000_003),
    },
    # Larger is harder in each; level 3 is the defaults (`tasks family=arith --params`).
    difficulty=Difficulty(
        harder={"n_expressions": 1, "max_depth": 1, "max_literal": 1},
        levels=(
            {"n_expressions": 20, "max_depth": 1, "max_literal": 9},
            {"n_expressions": 60, "max_depth": 2, "max_literal": 99},
            {"n_expressions": 150, "max_depth": 3, "max_literal": 99},
            {"n_expressions": 250, "max_depth": 4, "max_literal": 999},
            {"n_expressions": 280, "max_depth": 4, "max_literal": 9999},
        ),
    ),
    generate=generate,
)
