"""Binary-gated group filtering (`algo.binary_gate`): a training group whose binary outcomes
(each episode's `functional_correct`) are all equal carries no signal about solving the
task, whatever its shaped rewards, so it is dropped. The cookbook's own
`remove_constant_reward_groups` compares shaped totals, so a group that all failed while
writing different amounts of code survives it; this gate decides on the binary outcome
and then lets the cookbook drop the group through its public API: the gate's stage of
the training chain (`piexp.env.training_pipeline`) sets a gated group's totals to 0 (each
trajectory's true total is kept as the `binary_gate/own_total` metric), and the run sets
the cookbook's `remove_constant_reward_groups`, which removes groups of equal totals.
Each decision (the shaped totals it saw, dropped or not) goes into the group's record in
`group_outcomes.jsonl`; `gate_steps` reads it back as the per-step count of groups,
dropped groups and the fraction of informative ones. Run folders written before the
decisions moved there hold them in `binary_gate.jsonl`, which `gate_steps` reads too and
a resume of such a run trims by the same rule as the group records."""

from __future__ import annotations

from piexp.run_folder import RunFolder

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.env.group_outcomes import OUTCOMES_FILE, binary_outcome
from piexp.env.group_wrappers import GateDecision, GradedGroup, Stage
from piexp.files import atomic_write_text, read_jsonl

__all__ = ["GATE_FILE", "BinaryGate", "binary_outcome", "gate_steps"]

#: Where a run folder written before the group records held the gate's decisions held them.
GATE_FILE = RunFolder.LEGACY_BINARY_GATE


@dataclass(frozen=True)
class BinaryGate(Stage):
    """A group of equal binary outcomes gets equal totals (0), and its decision is set on
    the group for its record. `run_dir`: the run folder, whose earlier `binary_gate.jsonl`
    (if any) a resume trims."""

    run_dir: Path | None = None

    def __call__(self, group: GradedGroup) -> None:
        step_sums, totals = group.step_and_totals()
        outcomes = [binary_outcome(trajectory) for trajectory in group.trajectories]
        dropped = len(set(outcomes)) <= 1
        group.gate = GateDecision(dropped=dropped, shaped_totals=tuple(totals))
        if not dropped:
            group.rewards = [(final, {**metrics, "binary_gate/dropped": 0.0}) for final, metrics in group.rewards]
            return
        # Total 0.0 for each: s + (-s) is exactly 0.0 in floating point, so the cookbook's
        # exact comparison of totals sees them equal (a mean would differ in the last bit).
        group.rewards = [
            (-step_sums[i], {**metrics, "binary_gate/dropped": 1.0, "binary_gate/own_total": totals[i]})
            for i, (_, metrics) in enumerate(group.rewards)
        ]

    def resume_at(self, step: int) -> None:
        legacy = self.run_dir / GATE_FILE if self.run_dir is not None else None
        if legacy is not None and legacy.exists():
            kept = [line for line in read_jsonl(legacy) if int(line["step"]) < step]
            atomic_write_text(legacy, "".join(json.dumps(line) + "\n" for line in kept))


def gate_steps(run_dir: Path) -> list[dict[str, Any]]:
    """Per training step: groups, groups dropped by the gate, and the informative fraction
    (a group graded again at its place counts once, its last decision)."""
    run_dir = Path(run_dir)
    decisions: dict[tuple[int, int], bool] = {}
    for name in (GATE_FILE, OUTCOMES_FILE):  # the older file's decisions first
        path = run_dir / name
        for line in read_jsonl(path) if path.exists() else []:
            if line.get("dropped") is not None:
                decisions[(int(line["step"]), int(line["group"]))] = bool(line["dropped"])
    steps: dict[int, list[bool]] = {}
    for (step, _group), dropped in sorted(decisions.items()):
        steps.setdefault(step, []).append(dropped)
    return [
        {
            "step": step,
            "groups": len(flags),
            "dropped": sum(flags),
            "informative_fraction": round(1 - sum(flags) / len(flags), 4),
        }
        for step, flags in sorted(steps.items())
    ]
