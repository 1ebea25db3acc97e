"""Task families: deterministic workspace generators, their reference programs, and
overlap-proof train/eval splits.

Public API:
    Task, Family, Difficulty, TaskFileFamily, FAMILIES (the built-ins), build_tasks, build_splits,
    check_split_overlap, assert_no_overlap, OverlapReport, reference_solution,
    task_reference, get_family, resolve_params. What a family must provide is the
    protocol in `piexp.tasks.family` (and docs/families.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from piexp.errors import UserError
from piexp.tasks.core import MAX_SAFE_INTEGER, SPLITS, FrozenMap, Task
from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, FamilyDefinitionError, check_split
from piexp.tasks.families import BUILTIN_TARGETS
from piexp.tasks.overlap import OverlapReport, assert_no_overlap, check_split_overlap
from piexp.tasks.registry import TARGET_KEY, AnyFamily, activate, get_family, known_names, load_family, split_entry
from piexp.tasks.task_file import TaskFileFamily


def _builtin_family(name: str, target: str) -> Family:
    family = load_family(name, target)
    assert isinstance(family, Family), f"the built-in {target} is not a generated family"
    return family


# piexp's built-in families by name, in catalogue order (a run's own families are activated
# from its config).
FAMILIES: dict[str, Family] = {name: _builtin_family(name, target) for name, target in BUILTIN_TARGETS.items()}


def _plain(value: Any) -> Any:
    """Hydra's DictConfig (or any Mapping) -> plain dict, without importing omegaconf here."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def resolve_params(families: Sequence[str], params: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Each selected family's params: defaults updated by ``params[family]``.

    ``params`` is typically ``cfg.family`` (each entry a family's `_target_` and params);
    an entry with a `_target_` activates that family (loading its code), one without
    updates the params of the family already known by that name. Entries that name no
    family at all are refused, since they are almost certainly typos.
    """
    overrides = _plain(params or {})
    with_target = {
        name: entry for name, entry in overrides.items() if isinstance(entry, Mapping) and TARGET_KEY in entry
    }
    resolved = {name: params for name, (_family, params) in activate(with_target).items()}
    unknown = sorted(set(overrides) - set(with_target) - set(known_names()))
    if unknown:
        raise UserError(
            f"params given for unknown task family {', '.join(map(repr, unknown))}; "
            f"valid families: {', '.join(known_names())}"
        )
    return {
        name: resolved[name] if name in resolved else get_family(name).make_params(split_entry(overrides.get(name))[1])
        for name in families
    }


def build_tasks(
    split: str,
    tasks_per_family: int,
    seed: int,
    families: Sequence[str],
    params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    verify_determinism: bool = False,
) -> list[Task]:
    """Deterministically generate ``tasks_per_family`` tasks of each family for one split.

    Task i of family f comes from its own RNG keyed by (seed, split, f, i), so adding a
    family or raising ``tasks_per_family`` never changes the tasks already there, and the
    train and eval streams are disjoint by construction. Duplicates inside the split are
    refused (they would only arise from params too small to vary). With
    ``verify_determinism`` (the run's validation) every family builds its tasks twice and
    a difference is refused, naming the first differing task.
    """
    check_split(split)
    if isinstance(families, str):
        # "arith,graph_paths" (as a CLI or the reference env's comma list spells it).
        families = [name.strip() for name in families.split(",") if name.strip()]
    if tasks_per_family < 0:
        raise UserError(f"tasks_per_family must be >= 0, got {tasks_per_family}")
    families = list(dict.fromkeys(families))  # keep order, drop repeats
    resolved = resolve_params(families, params)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for name in families:
        family = get_family(name)
        built = family.tasks(split, tasks_per_family, seed, resolved[name])
        if verify_determinism:
            _refuse_nondeterminism(family, built, family.tasks(split, tasks_per_family, seed, resolved[name]))
        for task in built:
            if task.task_digest in seen:
                fix = (
                    "one task folder is read twice (the same Harbor digest): give it to one family only"
                    if task.verifier is not None
                    else f"raise the size params of family {name!r}"
                )
                raise UserError(f"tasks {seen[task.task_digest]} and {task.task_id} are identical; {fix}")
            seen[task.task_digest] = task.task_id
            tasks.append(task)
    return tasks


def _refuse_nondeterminism(family: AnyFamily, first: Sequence[Task], second: Sequence[Task]) -> None:
    for one, other in zip(first, second):
        if one.task_digest != other.task_digest or one.params_key != other.params_key:
            raise UserError(
                f"family {family.name!r} ({family.source_file}) is not deterministic: generated twice with the "
                f"same seed, task {one.task_id} came out different. A generator must draw every random choice "
                "from the rng it is given (not the random module, time, or set order)."
            )


def build_splits(
    train_tasks_per_family: int,
    eval_tasks_per_family: int,
    seed: int,
    families: Sequence[str],
    params: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    verify_determinism: bool = False,
) -> tuple[list[Task], list[Task], OverlapReport]:
    """Both splits plus their overlap report; refuses (UserError) any overlap."""
    train = build_tasks("train", train_tasks_per_family, seed, families, params, verify_determinism=verify_determinism)
    evals = build_tasks("eval", eval_tasks_per_family, seed, families, params, verify_determinism=verify_determinism)
    report = check_split_overlap(train, evals)
    report.raise_if_overlap()
    return train, evals, report


def reference_solution(family: str, language: str) -> str:
    """Source of the family's reference program in ``language`` (python/javascript/julia).

    The program reads the workspace files from its working directory and prints the
    answer as its last stdout line.
    """
    return get_family(family).reference(language)


def task_reference(task: Task, language: str) -> str:
    """The reference program for one task: its family's (a generator family has one
    program for all its tasks, looked up through `reference_solution` so a test can
    replace it), or the task's own (a task file gives one per task)."""
    family = get_family(task.family)
    if isinstance(family, TaskFileFamily):
        return family.reference(language, task.task_id)
    return reference_solution(task.family, language)


__all__ = [
    "BUILTIN_TARGETS",
    "FAMILIES",
    "Difficulty",
    "FamilyDefinitionError",
    "TaskFileFamily",
    "TARGET_KEY",
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
    "task_reference",
    "resolve_params",
]
