"""The training chain built in one place hands the cookbook the same batches and rewards,
and leaves the same records, as the chain of one wrapper per control it replaced: a
small run with every control on, stopped and resumed, compared with its values on the
earlier code (`fixtures/training_records.json`, written by `tests/env/training_records.py`
before the change). What differs is by design: the gate's decisions now sit in each
group's record in `group_outcomes.jsonl` (no `binary_gate.jsonl`), and a resumed run
without an outcome-driven sampler drops the records of the steps it trains again, as
one with a sampler always did, where the earlier code appended them a second time."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.env.training_records import FIXTURE, RUNS, training_records


def _last_per_place(lines: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    """A group's record at its (step, group): its last, as every reader takes it."""
    return {(line["step"], line["group"]): line for line in lines}


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return training_records(tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("run", list(RUNS))
def test_the_chain_gives_the_same_batches_rewards_and_records_as_before(played: dict[str, Any], run: str) -> None:
    """The three runs are played once for the module: 20-38 s on the 2-core development
    machine under other work (2026-12-04); each comparison then takes no time."""
    before, now = json.loads(FIXTURE.read_text())[run], played[run]
    for part in ("first", "resumed"):  # what the cookbook got: batches, rewards, step metrics
        assert now[part] == before[part], part
    old, new = before["records"], now["records"]
    assert new["transcripts"] == old["transcripts"]
    assert new["gate_steps"] == old["gate_steps"]
    assert new["binary_gate"] == []  # the decisions live in the group records now
    # One record per group, in step order, each the earlier file's last at its place
    # with the gate's decision (the earlier binary_gate.jsonl's last) folded in.
    places = [(line["step"], line["group"]) for line in new["group_outcomes"]]
    assert places == sorted(set(places))
    decisions = _last_per_place(old["binary_gate"])
    expected = {
        place: {**line, **({k: decisions[place][k] for k in ("shaped_totals", "dropped")} if decisions else {})}
        for place, line in _last_per_place(old["group_outcomes"]).items()
    }
    assert _last_per_place(new["group_outcomes"]) == expected
    if run == "pools_gate_shuffled":  # a sampler's resume already rewrote the file: byte for byte but the gate
        assert [
            {k: v for k, v in line.items() if k not in ("shaped_totals", "dropped")} for line in new["group_outcomes"]
        ] == old["group_outcomes"]
