"""The driver's record of which result of each training group a `rollouts=ray` run keeps
(`GroupLedger`): the first complete result of a (run, step, group) key, never a later
copy, with each step's attempts, losses and dropped copies counted for its metrics."""

from __future__ import annotations

from piexp.launch.ray_nodes import PlayedGroup
from piexp.launch.ray_ledger import GroupLedger


def _played(node: str, attempt: int) -> PlayedGroup:
    return PlayedGroup(result=None, records=[], node=node, attempt=attempt)


def test_the_first_complete_result_of_a_group_is_kept_and_later_copies_dropped() -> None:
    """A copy of a group already kept (a node that finished after its attempt was given
    up, or the same group asked for twice) is dropped, and the kept one is the first."""
    ledger = GroupLedger()
    key = ("run", 0, 1)
    assert ledger.next_attempt(key) == 1
    ledger.lost(key, given_up=False)
    assert ledger.next_attempt(key) == 2
    assert ledger.accept(key, _played("b", 2))
    assert not ledger.accept(key, _played("a", 1))
    assert ledger.accepted() == {key: (2, "b")}


def test_each_step_counts_its_attempts_losses_and_copies() -> None:
    """Step rows of metrics.jsonl: groups kept, attempts (and those beyond a group's
    first), attempts lost, groups given up, copies dropped and nodes that played."""
    ledger = GroupLedger()
    for group in (0, 1):
        ledger.next_attempt(("run", 3, group))
    ledger.lost(("run", 3, 1), given_up=False)
    ledger.next_attempt(("run", 3, 1))
    ledger.accept(("run", 3, 0), _played("a", 1))
    ledger.accept(("run", 3, 1), _played("b", 2))
    ledger.accept(("run", 3, 1), _played("a", 1))
    assert ledger.step_metrics(3) == {
        "rollouts/groups": 2.0,
        "rollouts/attempts": 3.0,
        "rollouts/attempts_again": 1.0,
        "rollouts/attempts_lost": 1.0,
        "rollouts/groups_lost": 0.0,
        "rollouts/copies_dropped": 1.0,
        "rollouts/nodes": 2.0,
    }
    assert ledger.step_metrics(4) == {}
