"""log_stats: parse a server log, count by service at one level, sum a field.

Needs a program: ~80 lines whose key=value fields come in varying order, a count per
service, an alphabetical tie-break, then a second pass over that service's lines. The
answer is computed here from the generated records (per-service latency totals kept while
drawing; the highest count, then the first name reaching it), independently of the
references, which parse the log.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from piexp.tasks.families._common import query_file
from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact

SERVICES = (
    "api",
    "auth",
    "billing",
    "cache",
    "db",
    "email",
    "feed",
    "gateway",
    "images",
    "jobs",
    "kv",
    "ledger",
    "metrics",
    "notify",
    "orders",
    "search",
)
LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
PATHS = ("/", "/login", "/cart", "/items", "/pay", "/search", "/health", "/user")


@dataclass(frozen=True)
class LogStatsParams:
    n_lines: int = 80  # lines in server.log
    n_services: int = 6  # distinct service names appearing in the log
    max_latency_ms: int = 2000  # latency_ms is drawn from 1..max_latency_ms


def generate(rng: random.Random, p: LogStatsParams):
    services = rng.sample(SERVICES, p.n_services)
    level = rng.choice(("WARN", "ERROR"))
    start = rng.randint(0, 20 * 86400)
    lines = []
    records = []
    latency_totals: Counter[str] = Counter()  # per service, every level, added as lines are drawn
    t = start
    for _ in range(p.n_lines):
        t += rng.randint(0, 90)
        day, rest = divmod(t, 86400)
        stamp = f"2024-03-{1 + day:02d}T{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}Z"
        lvl = rng.choices(LEVELS, weights=(2, 5, 2, 2))[0]
        service = rng.choice(services)
        latency = rng.randint(1, p.max_latency_ms)
        status = rng.choice((200, 200, 200, 201, 204, 301, 400, 404, 500, 503))
        fields = [
            f"latency_ms={latency}",
            f"status={status}",
            f"path={rng.choice(PATHS)}",
            f"user=u{rng.randint(1, 999)}",
        ]
        rng.shuffle(fields)
        lines.append(f"{stamp} {lvl} {service} " + " ".join(fields))
        records.append((lvl, service, latency))
        latency_totals[service] += latency
    counts = Counter(service for lvl, service, _ in records if lvl == level)
    if not counts:  # make sure the level occurs: rewrite the first line's level
        lvl, service, latency = records[0]
        records[0] = (level, service, latency)
        lines[0] = lines[0].replace(f" {lvl} ", f" {level} ", 1)
        counts[service] = 1
    most = max(counts.values())
    best = sorted(service for service, count in counts.items() if count == most)[0]
    answer = latency_totals[best]
    check_exact("log_stats", answer)
    instruction = (
        "`server.log` has one request per line: an ISO timestamp, a level (DEBUG, INFO, WARN "
        "or ERROR), a service name, then space-separated `key=value` fields in no fixed "
        "order (latency_ms, status, path, user).\n"
        f"Find the service with the most lines at level {level}; if several services tie, "
        "take the one whose name is alphabetically first. The answer is the sum of "
        "latency_ms over all lines of that service, at every level. The level is also "
        f"given in `query.txt` as `level={level}`. Print the answer as a decimal integer."
    )
    files = {"server.log": "\n".join(lines) + "\n", "query.txt": query_file(level=level)}
    return instruction, files, answer, {"level": level, "services": services}


FAMILY = Family(
    name="log_stats",
    summary="server log: busiest service at a level (alphabetical tie-break), its total latency",
    params_type=LogStatsParams,
    limits={
        "n_lines": (5, 300),
        "n_services": (1, len(SERVICES)),
        "max_latency_ms": (1, 100_000),
    },
    # Larger is harder in each; level 3 is the defaults (`tasks family=log_stats --params`).
    difficulty=Difficulty(
        harder={"n_lines": 1, "n_services": 1},
        levels=(
            {"n_lines": 10, "n_services": 2},
            {"n_lines": 40, "n_services": 4},
            {"n_lines": 80, "n_services": 6},
            {"n_lines": 160, "n_services": 6},
            {"n_lines": 300, "n_services": 6},
        ),
    ),
    generate=generate,
)
