"""Exactly once on the driver of a `rollouts=ray` run: Ray executes a group at least once
(a node that dies takes its attempt with it, and a retried task may finish twice), and
`GroupLedger` keeps the first complete result of each (run, step, group) key, drops later
copies, and counts each step's attempts, replays, losses and drops for its metrics."""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from piexp.launch.ray_nodes import PlayedGroup

__all__ = ["GroupKey", "GroupLedger"]

GroupKey = tuple[str, int, int]  # (run, step, group index)


class GroupLedger:
    """Which result of each group the run keeps: the first complete one of a key; later
    copies are dropped. Counts each step's attempts, replays, losses and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._accepted: dict[GroupKey, tuple[int, str]] = {}
        self._attempts: dict[GroupKey, int] = {}
        self._steps: dict[int, Counter[str]] = {}
        self._nodes: dict[int, set[str]] = {}

    def _count(self, key: GroupKey, name: str) -> None:
        self._steps.setdefault(key[1], Counter())[name] += 1

    def next_attempt(self, key: GroupKey) -> int:
        with self._lock:
            attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
            self._count(key, "attempts")
            if attempt > 1:
                self._count(key, "attempts_again")
            return attempt

    def lost(self, key: GroupKey, given_up: bool) -> None:
        with self._lock:
            self._count(key, "attempts_lost")
            if given_up:
                self._count(key, "groups_lost")

    def accept(self, key: GroupKey, played: PlayedGroup) -> bool:
        """Whether `played` is the key's result to keep (its first complete one)."""
        with self._lock:
            if key in self._accepted:
                self._count(key, "copies_dropped")
                return False
            self._accepted[key] = (played.attempt, played.node)
            self._count(key, "groups")
            self._nodes.setdefault(key[1], set()).add(played.node)
            return True

    def accepted(self) -> dict[GroupKey, tuple[int, str]]:
        with self._lock:
            return dict(self._accepted)

    def step_metrics(self, step: int) -> dict[str, float]:
        with self._lock:
            counts = self._steps.get(step)
            if counts is None:
                return {}
            names = ("groups", "attempts", "attempts_again", "attempts_lost", "groups_lost", "copies_dropped")
            metrics = {f"rollouts/{name}": float(counts.get(name, 0)) for name in names}
            metrics["rollouts/nodes"] = float(len(self._nodes.get(step, ())))
            return metrics
