"""`python -m piexp tasks family=NAME --params`: what each difficulty parameter of a
family does, its range and default, and one example task at the easiest and at the
default setting. The descriptions are the comments on the family's params dataclass
(`piexp/tasks/families/NAME.py`), their one home."""

from __future__ import annotations

import dataclasses
import inspect
import re

from piexp.errors import UserError
from piexp.tasks.family import Family, GeneratorError
from piexp.tasks.task_file import TaskFileFamily

# `name: int = 150  # what it changes` in a params dataclass.
_FIELD_LINE = re.compile(r"^\s*(?P<name>\w+)\s*:\s*[\w\[\], |]+=\s*[^#]+#\s*(?P<doc>.+)$")


def param_docs(family: Family) -> dict[str, str]:
    """Parameter name -> the comment that explains it."""
    docs: dict[str, str] = {}
    for line in inspect.getsource(family.params_type).splitlines():
        match = _FIELD_LINE.match(line)
        if match:
            docs[match["name"]] = match["doc"].strip()
    return docs


def _example(family: Family, params: dict[str, int], label: str, max_chars: int) -> str:
    from piexp.tasks import build_tasks

    try:
        (task,) = build_tasks(
            split="train", tasks_per_family=1, seed=0, families=[family.name], params={family.name: params}
        )
    except GeneratorError:
        raise  # the generator's bug, not the setting's: the command fails naming it
    except UserError as error:
        return f"## Example at {label}\n\n(not a valid setting: {error})\n"
    lines = [
        f"## Example at {label}: {', '.join(f'{k}={v}' for k, v in params.items()) or 'defaults'}",
        "",
        task.instruction,
        "",
    ]
    for name, text in sorted(task.files.items()):
        shown = text if len(text) <= max_chars else text[:max_chars] + f"\n... ({len(text)} characters in all)"
        lines += [f"--- {name}", shown, ""]
    lines.append(f"answer: {task.answer}")
    return "\n".join(lines) + "\n"


def difficulty_lines(family: Family) -> list[str]:
    """The declared difficulty: the parameters that make tasks harder, and the level table."""
    difficulty = family.difficulty
    if difficulty is None:
        return ["Difficulty: not declared (no levels; `python -m piexp calibrate` cannot walk this family)."]
    names = list(difficulty.harder)
    lines = [
        "Difficulty: harder with "
        + ", ".join(f"{'larger' if difficulty.harder[name] > 0 else 'smaller'} {name}" for name in names)
        + f"; levels 1..{difficulty.count} (other parameters at their defaults):",
        "",
        "| level | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for number, level in enumerate(difficulty.levels, start=1):
        lines.append(f"| {number} | " + " | ".join(str(level[name]) for name in names) + " |")
    return lines


def render_params_help(family: Family | TaskFileFamily, max_chars: int = 300) -> str:
    own = getattr(family, "params_help", None)  # a family kind that says its own (Harbor folders)
    if own is not None:
        return own()
    if isinstance(family, TaskFileFamily):
        return (
            f"# {family.name}: {family.summary}\n\nSet with family.{family.name}.NAME=VALUE:\n"
            f"- path: the JSON Lines file of its tasks (now {family.source_file})\n"
            "- eval_percent: percent of the tasks without a `split` field assigned to eval (0..100)\n"
        )
    docs = param_docs(family)
    defaults = dataclasses.asdict(family.defaults)
    lines = [
        f"# {family.name}: {family.summary}",
        "",
        f"Set with family.{family.name}.NAME=VALUE (integers; values outside the range are refused).",
        "",
        "| parameter | range | default | what it changes |",
        "| --- | --- | --- | --- |",
    ]
    for name in family.param_names():
        low, high = family.limits[name]
        lines.append(f"| {name} | {low}..{high} | {defaults[name]} | {docs.get(name, '')} |")
    lines += ["", *difficulty_lines(family)]
    easiest = {name: family.limits[name][0] for name in family.param_names()}
    examples = [
        _example(family, easiest, "the lowest values", max_chars),
        _example(family, {}, "the defaults", max_chars),
    ]
    return "\n".join(lines) + "\n\n" + "\n".join(examples)
