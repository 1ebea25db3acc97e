"""Binary-gated group filtering (`algo.binary_gate`): a training group whose binary outcomes
(each episode's `functional_correct`) are all equal carries no signal about solving the
task, whatever its shaped rewards, so it is dropped. The cookbook's own
`remove_constant_reward_groups` compares shaped totals, so a group that all failed while
writing different amounts of code survives it; this gate decides on the binary outcome
and then lets the cookbook drop the group through its public API: the group builder's
`compute_group_rewards` sets a gated group's totals to 0 (each trajectory's
true total is kept as the `binary_gate/own_total` metric), and the run sets the
cookbook's `remove_constant_reward_groups`, which removes groups of equal totals. Each
group's decision is appended to `binary_gate.jsonl` in the run folder (step, group,
outcomes, shaped totals, dropped); `gate_steps` reads it back as the per-step count of
groups, dropped groups and the fraction of informative ones."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory

from piexp.env.group_outcomes import binary_outcome
from piexp.env.group_wrappers import GroupWrapper, WrappingDataset, step_and_total_rewards

__all__ = ["GATE_FILE", "BinaryGateDataset", "BinaryGateGroupBuilder", "binary_outcome", "gate_steps"]

# The per-group record of a gated run, in its run folder.
GATE_FILE = "binary_gate.jsonl"

_write_lock = threading.Lock()


@dataclass(frozen=True)
class BinaryGateGroupBuilder(GroupWrapper):
    """The inner group builder; a group of equal binary outcomes gets equal totals."""

    step: int
    group: int
    log_path: str

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        inner = await self.inner.compute_group_rewards(trajectory_group, env_group)
        step_sums, totals = step_and_total_rewards(trajectory_group, inner)
        outcomes = [binary_outcome(trajectory) for trajectory in trajectory_group]
        dropped = len(set(outcomes)) <= 1
        self._record(outcomes, totals, dropped)
        if not dropped:
            return [(final, {**metrics, "binary_gate/dropped": 0.0}) for final, metrics in inner]
        # Total 0.0 for each: s + (-s) is exactly 0.0 in floating point, so the cookbook's
        # exact comparison of totals sees them equal (a mean would differ in the last bit).
        return [
            (-step_sums[i], {**metrics, "binary_gate/dropped": 1.0, "binary_gate/own_total": totals[i]})
            for i, (_, metrics) in enumerate(inner)
        ]

    def _record(self, outcomes: list[float], totals: list[float], dropped: bool) -> None:
        line = {"step": self.step, "group": self.group, "outcomes": outcomes, "shaped_totals": totals}
        with _write_lock, open(self.log_path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps({**line, "dropped": dropped}) + "\n")


class BinaryGateDataset(WrappingDataset):
    """The inner dataset's batches, each group behind a BinaryGateGroupBuilder."""

    def __init__(self, inner: RLDataset, log_path: str) -> None:
        super().__init__(inner)
        self.log_path = log_path

    def wrap(self, builder: EnvGroupBuilder, index: int, position: int) -> EnvGroupBuilder:
        return BinaryGateGroupBuilder(inner=builder, step=index, group=position, log_path=self.log_path)


def gate_steps(run_dir: Path) -> list[dict[str, Any]]:
    """Per training step: groups, groups dropped by the gate, and the informative fraction
    (a step replayed after a resume counts once, its last decisions)."""
    from piexp.files import read_jsonl

    path = Path(run_dir) / GATE_FILE
    decisions: dict[tuple[int, int], bool] = {}
    for line in read_jsonl(path) if path.exists() else []:
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
