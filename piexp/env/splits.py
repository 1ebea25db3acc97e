"""A run's train and eval splits (overlap refused by the task builder) with the overlap
report that goes into the manifest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piexp.config.schema import RunConfig
from piexp.tasks import Task, build_splits as build_task_splits


@dataclass(frozen=True)
class RunSplits:
    train: list[Task]
    eval: list[Task]
    overlap_report: dict[str, Any]

    def digests(self) -> dict[str, list[str]]:
        return {
            "train": [task.task_digest for task in self.train],
            "eval": [task.task_digest for task in self.eval],
        }


def build_splits(config: RunConfig) -> RunSplits:
    train, evaluation, report = build_task_splits(
        train_tasks_per_family=config.tasks.train_per_family,
        eval_tasks_per_family=config.tasks.eval_per_family,
        seed=config.seed,
        families=config.families,
        params=config.family,
    )
    return RunSplits(train=train, eval=evaluation, overlap_report=report.to_dict())
