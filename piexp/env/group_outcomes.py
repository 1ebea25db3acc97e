"""Every graded training group's binary outcomes (each episode's `functional_correct`), the
one record the online controls read: the informative-group fraction of a step, the pass
rate that moves a task between difficulty pools, the rolling pass rate that moves a
family's level and, with the binary gate on, the gate's decision. The `OutcomeRecord`
stage of the training chain (`piexp.env.training_pipeline`) makes each graded group a
`GroupOutcome` in the run's `OutcomeLog`, kept in memory and appended to
`group_outcomes.jsonl` in the run folder. A resumed run restarts at a checkpointed
step: `OutcomeLog.resume_at` drops the outcomes of that step and later ones (the
interrupted work, sampled again), so what the controls rebuild from the file is exactly
what the uninterrupted run had."""

from __future__ import annotations

from piexp.run_folder import RunFolder

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tinker_cookbook.rl.types import Trajectory

from piexp.env.group_wrappers import GradedGroup, RecordingStage, workspace_group
from piexp.files import atomic_write_text, read_jsonl

__all__ = ["OUTCOMES_FILE", "GroupOutcome", "OutcomeLog", "OutcomeRecord", "binary_outcome", "workspace_group"]

# A training run's graded groups, one JSON line each, in its run folder.
OUTCOMES_FILE = RunFolder.GROUP_OUTCOMES
# The reward metric (piexp.env.reward) that is an episode's binary outcome.
OUTCOME_METRIC = "functional_correct"


def binary_outcome(trajectory: Trajectory) -> float:
    """The episode's `functional_correct` (its last transition that reports one; 0 if none)."""
    for transition in reversed(trajectory.transitions):
        if OUTCOME_METRIC in transition.metrics:
            return float(transition.metrics[OUTCOME_METRIC])
    return 0.0


@dataclass(frozen=True)
class GroupOutcome:
    """One graded group: where it was in the run (step: the batch index; group: its place
    in the batch), what it was, and, with the binary gate on, the gate's decision (the
    shaped totals it saw and whether it dropped the group; absent otherwise)."""

    step: int
    group: int
    task_id: str
    task_digest: str
    family: str
    language: str
    outcomes: tuple[float, ...]
    shaped_totals: tuple[float, ...] | None = None
    dropped: bool | None = None

    @property
    def pass_rate(self) -> float:
        return sum(self.outcomes) / len(self.outcomes) if self.outcomes else 0.0

    @property
    def informative(self) -> bool:
        """Whether the episodes' binary outcomes differ (else the group teaches nothing)."""
        return len(set(self.outcomes)) > 1

    def to_json(self) -> dict[str, Any]:
        line = {**asdict(self), "outcomes": list(self.outcomes)}
        if self.dropped is None:  # no gate: the record as before the gate's decisions joined it
            del line["shaped_totals"], line["dropped"]
        else:
            line["shaped_totals"] = list(self.shaped_totals or ())
        return line

    @classmethod
    def from_json(cls, line: dict[str, Any]) -> GroupOutcome:
        totals = line.get("shaped_totals")
        return cls(
            **{
                **line,
                "outcomes": tuple(float(value) for value in line["outcomes"]),
                "shaped_totals": None if totals is None else tuple(float(value) for value in totals),
            }
        )


class OutcomeLog:
    """A run's graded groups: in memory by (step, group), and appended to `path` if given.
    A group graded twice at one place (a step replayed) counts once, its last grading."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._steps: dict[int, dict[int, GroupOutcome]] = {}
        self._resumed = False

    def record(self, outcome: GroupOutcome) -> None:
        with self._lock:
            self._steps.setdefault(outcome.step, {})[outcome.group] = outcome
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as sink:
                    sink.write(json.dumps(outcome.to_json()) + "\n")

    def resume_at(self, step: int) -> None:
        """Called once, before the first batch (`step`) this process trains on: keeps the
        recorded outcomes of earlier steps (read from the file) and drops later ones."""
        with self._lock:
            if self._resumed:
                return
            self._resumed = True
            if self.path is None or not self.path.exists():
                return
            kept = [GroupOutcome.from_json(line) for line in read_jsonl(self.path) if int(line["step"]) < step]
            atomic_write_text(self.path, "".join(json.dumps(outcome.to_json()) + "\n" for outcome in kept))
            for outcome in kept:
                self._steps.setdefault(outcome.step, {})[outcome.group] = outcome

    def of_steps(self, start: int, stop: int) -> list[GroupOutcome]:
        """The outcomes of steps start..stop-1, in (step, group) order."""
        with self._lock:
            return [
                self._steps[step][group]
                for step in sorted(s for s in self._steps if start <= s < stop)
                for group in sorted(self._steps[step])
            ]

    def of_step(self, step: int) -> list[GroupOutcome]:
        return self.of_steps(step, step + 1)


def group_outcome(group: GradedGroup) -> GroupOutcome:
    """The record of a graded group (the gate's decision included, if it ran before)."""
    workspace = group.workspace
    gate = group.gate
    return GroupOutcome(
        step=group.step,
        group=group.group,
        task_id=workspace.task.task_id,
        task_digest=workspace.task.task_digest,
        family=workspace.task.family,
        language=workspace.language,
        outcomes=tuple(binary_outcome(trajectory) for trajectory in group.trajectories),
        shaped_totals=None if gate is None else gate.shaped_totals,
        dropped=None if gate is None else gate.dropped,
    )


@dataclass(frozen=True)
class OutcomeRecord(RecordingStage):
    """Each graded group's binary outcomes (and the gate's decision, if it ran before this
    stage) into the run's `OutcomeLog`."""

    log: OutcomeLog

    def recorder(self) -> Callable[[GradedGroup], GroupOutcome]:
        return group_outcome

    def commit(self, record: Any, played_on: str | None = None) -> None:
        self.log.record(record)

    def resume_at(self, step: int) -> None:
        self.log.resume_at(step)
