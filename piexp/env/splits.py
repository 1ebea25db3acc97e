"""A run's train and eval splits (overlap refused by the task builder) with the overlap
report and the record of each family's origin and digests that go into the manifest."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from piexp.config.schema import RunConfig
from piexp.tasks import Task, build_splits as build_task_splits
from piexp.tasks import resolve_params, split_entry
from piexp.tasks.registry import origin_record


@dataclass(frozen=True)
class RunSplits:
    train: list[Task]
    eval: list[Task]
    overlap_report: dict[str, Any]
    # family name -> its `_target_`, origin (module/file or task file, package and
    # version) and digests of its code, references and params (`family_records`).
    family_origins: dict[str, Any] = field(default_factory=dict)

    def digests(self) -> dict[str, list[str]]:
        return {
            "train": [task.task_digest for task in self.train],
            "eval": [task.task_digest for task in self.eval],
        }


def build_splits(config: RunConfig, *, verify_determinism: bool = False) -> RunSplits:
    """The run's splits; with `verify_determinism` (the command line's validation) every
    family generates its tasks twice and a difference is refused."""
    train, evaluation, report = build_task_splits(
        train_tasks_per_family=config.tasks.train_per_family,
        eval_tasks_per_family=config.tasks.eval_per_family,
        seed=config.seed,
        families=config.families,
        params=config.family,
        verify_determinism=verify_determinism,
    )
    return RunSplits(
        train=train, eval=evaluation, overlap_report=report.to_dict(), family_origins=family_records(config)
    )


def family_records(config: RunConfig) -> dict[str, Any]:
    """Each family's manifest record: `_target_`, origin and digests (code, references, params)."""
    params = resolve_params(config.families, config.family)
    return {
        name: origin_record(name, split_entry(config.family.get(name))[0], params[name]) for name in config.families
    }
