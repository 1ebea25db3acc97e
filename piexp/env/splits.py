"""A run's train and eval splits (overlap refused by the task builder) with the overlap
report and the record of each family's origin and digests that go into the manifest; with
adaptive difficulty (`tasks.adaptive`), each adapted family's train tasks at every level it
may reach, from the same seeded streams as its train split, overlap with the eval split
refused the same way."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from piexp.config.schema import RunConfig
from piexp.tasks import Task, build_splits as build_task_splits
from piexp.tasks import TARGET_KEY, build_tasks, check_split_overlap, get_family, resolve_params, split_entry
from piexp.tasks.registry import origin_record


@dataclass(frozen=True)
class RunSplits:
    train: list[Task]
    eval: list[Task]
    overlap_report: dict[str, Any]
    # family name -> its `_target_`, origin (module/file or task file, package and
    # version) and digests of its code, references and params (`family_records`).
    family_origins: dict[str, Any] = field(default_factory=dict)
    # tasks.adaptive: adapted family -> level -> its train tasks at that level (else empty).
    train_levels: dict[str, dict[int, list[Task]]] = field(default_factory=dict)

    def digests(self) -> dict[str, list[str]]:
        levels = {
            f"train_level/{family}/{level}": [task.task_digest for task in tasks]
            for family, by_level in self.train_levels.items()
            for level, tasks in by_level.items()
        }
        return {
            "train": [task.task_digest for task in self.train],
            "eval": [task.task_digest for task in self.eval],
            **levels,
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
        train=train,
        eval=evaluation,
        overlap_report=report.to_dict(),
        family_origins=family_records(config),
        train_levels=level_train_tasks(config, evaluation) if config.tasks.adaptive.enabled else {},
    )


def adapted_families(config: RunConfig) -> list[str]:
    """The families `tasks.adaptive` moves (validated: each declares its difficulty)."""
    chosen = config.tasks.adaptive.families
    return [name for name in config.families if chosen is None or name in chosen]


def level_train_tasks(config: RunConfig, evaluation: list[Task]) -> dict[str, dict[int, list[Task]]]:
    """Each adapted family's train tasks at every level from min_level to its highest: the
    run's params with the level's values, task i from the same stream (seed, train,
    family, i) at every level, its id suffixed with the level; overlap with the eval split
    is refused as for the train split."""
    adaptive = config.tasks.adaptive
    levels: dict[str, dict[int, list[Task]]] = {}
    for name in adapted_families(config):
        difficulty = getattr(get_family(name), "difficulty", None)
        assert difficulty is not None, "validated by RunConfig: an adapted family declares its difficulty"
        target, params = split_entry(config.family.get(name))
        highest = adaptive.max_level if adaptive.max_level is not None else difficulty.count
        levels[name] = {}
        for level in range(adaptive.min_level, highest + 1):
            entry = {**({TARGET_KEY: target} if target else {}), **params, **difficulty.params(name, level)}
            tasks = build_tasks("train", config.tasks.train_per_family, config.seed, [name], {name: entry})
            levels[name][level] = [dataclasses.replace(task, task_id=f"{task.task_id}-level{level}") for task in tasks]
        check_split_overlap([task for tasks in levels[name].values() for task in tasks], evaluation).raise_if_overlap()
    return levels


def family_records(config: RunConfig) -> dict[str, Any]:
    """Each family's manifest record: `_target_`, origin and digests (code, references, params)."""
    params = resolve_params(config.families, config.family)
    return {
        name: origin_record(name, split_entry(config.family.get(name))[0], params[name]) for name in config.families
    }
