"""A family's references, run before the run's folder exists. For every family piexp does
not ship (the built-ins' references are proven by piexp's own tests), each reference the
run will play is run in the sandbox on the first task of each split; one that crashes or
prints a number other than the task's answer is refused as the user's error (exit 2,
nothing written), naming the family, the task, the language and the reference file.
A runtime the sandbox lacks is left to `mode=check`, which reports it as missing.
`mode=check` then proves the whole path (renderer, tools, reward) on more tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from piexp.config.schema import RunConfig
from piexp.errors import UserError
from piexp.launch.sandbox import run_sandbox
from piexp.sandbox.client import close_sandbox_clients, sandbox_client
from piexp.tasks import Task, get_family, split_entry, task_reference
from piexp.tasks.registry import is_builtin

MISSING_RUNTIME = 127  # what the sandbox answers, like a shell, for a runtime it lacks


def references_to_prove(config: RunConfig, tasks: Sequence[Task]) -> list[tuple[Task, str]]:
    """(task, language) pairs: the first task of each split of each family the user
    brought, in each language of that split the run asks for."""
    if not config.needs_references:
        return []
    mine = {name for name in config.families if not is_builtin(name, split_entry(config.family[name])[0])}
    languages = {"train": config.train_languages, "eval": config.eval_languages}
    pairs: list[tuple[Task, str]] = []
    seen: set[tuple[str, str]] = set()
    for task in tasks:
        if task.family in mine and (task.family, task.split) not in seen:
            seen.add((task.family, task.split))
            pairs.extend((task, language) for language in dict.fromkeys(languages[task.split]))
    return pairs


def refuse_wrong_references(config: RunConfig, tasks: Sequence[Task]) -> None:
    pairs = references_to_prove(config, tasks)
    if not pairs:
        return
    with run_sandbox(config.sandbox) as url:
        results = asyncio.run(_run_all(url, pairs, config.limits.sandbox_timeout_s))
    for (task, language), response in zip(pairs, results):
        problem = _problem(response, task.answer)
        if problem:
            family = get_family(task.family)
            where = getattr(family, "reference_file", None)
            source = where(language) if where is not None else family.source_file
            raise UserError(
                f"family {task.family!r}: its {language} reference ({source}) {problem} on task {task.task_id} "
                f"({task.split} split), whose answer is {task.answer}. Fix the reference (or the answer it "
                f"disagrees with); `python -m piexp tasks --config-dir DIR family={task.family}` shows the task."
            )


async def _run_all(url: str, pairs: Sequence[tuple[Task, str]], timeout: int) -> list[dict[str, Any]]:
    client = sandbox_client(url)

    async def one(task: Task, language: str) -> dict[str, Any]:
        _ok, response = await client.run(
            code=task_reference(task, language), files=dict(task.files), timeout=timeout, language=language
        )
        return response

    try:
        return list(await asyncio.gather(*(one(task, language) for task, language in pairs)))
    finally:
        await close_sandbox_clients()


def _problem(response: dict[str, Any], answer: str) -> str | None:
    """What is wrong with one reference run, or None when it printed the answer."""
    result = response.get("run_result")
    if not isinstance(result, dict):
        return None  # the sandbox itself failed: mode=check reports infrastructure errors
    code = result.get("return_code")
    if code == MISSING_RUNTIME:
        return None  # a missing runtime: mode=check reports it
    stderr = str(result.get("stderr") or "").strip()
    if code != 0:
        return f"crashed (exit {code}: {stderr[-300:] or 'no stderr'})"
    lines = [line.strip() for line in str(result.get("stdout") or "").splitlines() if line.strip()]
    printed = lines[-1] if lines else ""
    if printed != answer:
        return f"printed {printed[:80]!r} as its last line"
    return None
