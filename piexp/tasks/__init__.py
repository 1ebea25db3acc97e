"""Task families: deterministic workspace generators, their reference programs, and
overlap-proof train/eval splits.

Public API:
    Task, FAMILIES, build_tasks, build_splits, check_split_overlap,
    assert_no_overlap, OverlapReport, reference_solution, get_family, resolve_params.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from piexp.errors import UserError
from piexp.tasks.core import MAX_SAFE_INTEGER, SPLITS, FrozenMap, Task, derive_rng
from piexp.tasks.family import Family
from piexp.tasks.families import ALL_FAMILIES
from piexp.tasks.overlap import OverlapReport, assert_no_overlap, check_split_overlap

FAMILIES: dict[str, Family] = {family.name: family for family in ALL_FAMILIES}


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise UserError(f"unknown task family {name!r}; valid families: {', '.join(sorted(FAMILIES))}") from None


def _plain(value: Any) -> Any:
    """Hydra's DictConfig (or any Mapping) -> plain dict, without importing omegaconf here."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def resolve_params(families: Sequence[str], params: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Each selected family's params: defaults updated by ``params[family]``.

    ``params`` is typically ``cfg.family`` (which may name more families than are selected,
    e.g. after ``family=all``); entries for unselected families are ignored, but entries
    that name no family at all are refused, since they are almost certainly typos.
    """
    overrides = _plain(params or {})
    unknown = sorted(set(overrides) - set(FAMILIES))
    if unknown:
        raise UserError(
            f"params given for unknown task family {', '.join(map(repr, unknown))}; "
            f"valid families: {', '.join(sorted(FAMILIES))}"
        )
    return {name: get_family(name).make_params(overrides.get(name)) for name in families}


def build_tasks(
    split: str,
    tasks_per_family: int,
    seed: int,
    families: Sequence[str],
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Task]:
    """Deterministically generate ``tasks_per_family`` tasks of each family for one split.

    Task i of family f comes from its own RNG keyed by (seed, split, f, i), so adding a
    family or raising ``tasks_per_family`` never changes the tasks already there, and the
    train and eval streams are disjoint by construction. Duplicates inside the split are
    refused (they would only arise from params too small to vary).
    """
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    if isinstance(families, str):
        # "arith,graph_paths" (as a CLI or the reference env's comma list spells it).
        families = [name.strip() for name in families.split(",") if name.strip()]
    if tasks_per_family < 0:
        raise UserError(f"tasks_per_family must be >= 0, got {tasks_per_family}")
    families = list(dict.fromkeys(families))  # keep order, drop repeats
    for name in families:
        get_family(name)
    resolved = resolve_params(families, params)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for name in families:
        family = FAMILIES[name]
        for index in range(tasks_per_family):
            rng, stream = derive_rng(seed, split, name, index)
            instruction, files, answer, used = family.generate(rng, resolved[name])
            if not -MAX_SAFE_INTEGER < int(answer) < MAX_SAFE_INTEGER:
                raise AssertionError(f"{name}: answer {answer} exceeds +/-2^53")
            task = Task(
                task_id=f"{split}-{name}-{seed}-{index:05d}",
                family=name,
                split=split,
                instruction=instruction,
                files=files,
                answer=str(int(answer)),
                # The stream key makes (family, params) identify the generator stream, so
                # the repeated-params check catches two tasks drawn from the same stream.
                params={**dataclasses.asdict(resolved[name]), **used, "stream": stream},
            )
            if task.task_digest in seen:
                raise UserError(
                    f"tasks {seen[task.task_digest]} and {task.task_id} are identical; "
                    f"raise the size params of family {name!r}"
                )
            seen[task.task_digest] = task.task_id
            tasks.append(task)
    return tasks


def build_splits(
    train_tasks_per_family: int,
    eval_tasks_per_family: int,
    seed: int,
    families: Sequence[str],
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[Task], list[Task], OverlapReport]:
    """Both splits plus their overlap report; refuses (UserError) any overlap."""
    train = build_tasks("train", train_tasks_per_family, seed, families, params)
    evals = build_tasks("eval", eval_tasks_per_family, seed, families, params)
    report = check_split_overlap(train, evals)
    report.raise_if_overlap()
    return train, evals, report


def reference_solution(family: str, language: str) -> str:
    """Source of the family's reference program in ``language`` (python/javascript/julia).

    The program reads the workspace files from its working directory and prints the
    answer as its last stdout line.
    """
    return get_family(family).reference(language)


__all__ = [
    "FAMILIES",
    "MAX_SAFE_INTEGER",
    "SPLITS",
    "Family",
    "FrozenMap",
    "OverlapReport",
    "Task",
    "assert_no_overlap",
    "build_splits",
    "build_tasks",
    "check_split_overlap",
    "get_family",
    "reference_solution",
    "resolve_params",
]
