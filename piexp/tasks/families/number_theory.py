"""number_theory: sums of primes over ranges, filtered by a digit-sum property.

Needs a program: ~30 ranges reaching up to 100000 (a sieve), a digit-sum test and a
divisor that varies per task.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from piexp.tasks.families._common import query_file
from piexp.tasks.family import Family, check_exact


@dataclass(frozen=True)
class NumberTheoryParams:
    n_ranges: int = 30  # lines `a b` in ranges.txt
    max_value: int = 100000  # ranges lie within 1..max_value
    max_divisor: int = 11  # the digit-sum divisor k is drawn from 2..max_divisor (not multiples of 3)

    def check(self) -> str | None:
        return None if self.max_divisor >= 2 else "max_divisor must be at least 2"


@lru_cache(maxsize=8)
def _prime_prefix(limit: int) -> tuple[bytes, int]:
    """Sieve of Eratosthenes up to ``limit``, cached across tasks (same max_value)."""
    sieve = bytearray([1]) * (limit + 1)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, int(limit**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, limit + 1, i)))
    return bytes(sieve), limit


@lru_cache(maxsize=64)
def _filtered_prefix(limit: int, k: int) -> list[int]:
    """prefix[n] = sum of primes p <= n whose digit sum is divisible by k."""
    sieve, _ = _prime_prefix(limit)
    prefix = [0] * (limit + 1)
    running = 0
    for n in range(limit + 1):
        if sieve[n] and sum(map(int, str(n))) % k == 0:
            running += n
        prefix[n] = running
    return prefix


def generate(rng: random.Random, p: NumberTheoryParams):
    # A multiple of 3 would be degenerate: digit sum = n (mod 3), so the only prime whose
    # digit sum a multiple of 3 divides is 3 itself and most answers would be 0.
    k = rng.choice([d for d in range(2, p.max_divisor + 1) if d % 3])
    prefix = _filtered_prefix(p.max_value, k)
    lines = []
    answer = 0
    for _ in range(p.n_ranges):
        width = rng.randint(0, max(1, p.max_value // 4))
        a = rng.randint(1, max(1, p.max_value - width))
        b = min(p.max_value, a + width)
        lines.append(f"{a} {b}")
        answer += prefix[b] - prefix[a - 1]
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
    generate=generate,
)
