"""number_theory: sums of primes over ranges, filtered by a digit-sum property.

Needs a program: ~30 ranges reaching up to 100000 (a sieve), a digit-sum test and a
divisor that varies per task. The answer is computed here with Miller-Rabin and binary
search, independently of the references' sieve and prefix sums.
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

from piexp.tasks.families._common import query_file
from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact


@dataclass(frozen=True)
class NumberTheoryParams:
    n_ranges: int = 30  # lines `a b` in ranges.txt
    max_value: int = 100000  # ranges lie within 1..max_value
    max_divisor: int = 11  # the digit-sum divisor k is drawn from 2..max_divisor (not multiples of 3)

    def check(self) -> str | None:
        return None if self.max_divisor >= 2 else "max_divisor must be at least 2"


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin; the references sieve, so a bug in either shows up as a mismatch.

    Bases 2, 3, 5 and 7 decide every n below 3,215,031,751, far above max_value's limit.
    """
    if n < 2:
        return False
    for base in (2, 3, 5, 7):
        if n % base == 0:
            return n == base
    odd, twos = n - 1, 0
    while odd % 2 == 0:
        odd //= 2
        twos += 1
    for base in (2, 3, 5, 7):
        x = pow(base, odd, n)
        if x in (1, n - 1):
            continue
        for _ in range(twos - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _digit_sum(n: int) -> int:
    total = 0
    while n:
        n, digit = divmod(n, 10)
        total += digit
    return total


@lru_cache(maxsize=8)
def _primes(limit: int) -> tuple[int, ...]:
    """Primes up to ``limit`` in increasing order, cached across tasks (same max_value)."""
    return tuple(n for n in range(2, limit + 1) if _is_prime(n))


@lru_cache(maxsize=64)
def _qualifying(limit: int, k: int) -> tuple[list[int], list[int]]:
    """Primes up to ``limit`` whose digit sum k divides, and their running sums (from 0)."""
    primes = [p for p in _primes(limit) if _digit_sum(p) % k == 0]
    return primes, [0, *accumulate(primes)]


def _range_sum(limit: int, k: int, a: int, b: int) -> int:
    """Sum of the qualifying primes in a..b, located by binary search (no per-number table)."""
    primes, sums = _qualifying(limit, k)
    return sums[bisect_right(primes, b)] - sums[bisect_left(primes, a)]


def generate(rng: random.Random, p: NumberTheoryParams):
    # A multiple of 3 would be degenerate: digit sum = n (mod 3), so the only prime whose
    # digit sum a multiple of 3 divides is 3 itself and most answers would be 0.
    k = rng.choice([d for d in range(2, p.max_divisor + 1) if d % 3])
    lines = []
    answer = 0
    for _ in range(p.n_ranges):
        width = rng.randint(0, max(1, p.max_value // 4))
        a = rng.randint(1, max(1, p.max_value - width))
        b = min(p.max_value, a + width)
        lines.append(f"{a} {b}")
        answer += _range_sum(p.max_value, k, a, b)
    check_exact("number_theory", answer)
    instruction = (
        "Each line of `ranges.txt` holds two integers `a b` with a <= b. For each line, take "
        f"every prime p with a <= p <= b whose decimal digit sum is divisible by {k}, and add "
        "them up; a prime is counted once per line it falls in, so overlapping ranges count "
        "it again. The answer is the total over all lines. The divisor is also given in "
        f"`query.txt` as `k={k}`. Print the answer as a decimal integer."
    )
    files = {"ranges.txt": "\n".join(lines) + "\n", "query.txt": query_file(k=k)}
    return instruction, files, answer, {"k": k}


FAMILY = Family(
    name="number_theory",
    summary="sum of primes with digit sum divisible by k, over many ranges",
    params_type=NumberTheoryParams,
    limits={"n_ranges": (1, 200), "max_value": (10, 2_000_000), "max_divisor": (2, 60)},
    # Larger is harder in each; level 3 is the defaults (`tasks family=number_theory --params`).
    difficulty=Difficulty(
        harder={"n_ranges": 1, "max_value": 1},
        levels=(
            {"n_ranges": 5, "max_value": 1000},
            {"n_ranges": 15, "max_value": 10000},
            {"n_ranges": 30, "max_value": 100000},
            {"n_ranges": 80, "max_value": 500000},
            {"n_ranges": 200, "max_value": 2000000},
        ),
    ),
    generate=generate,
)
