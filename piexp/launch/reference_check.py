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
    verified = [task for task in tasks if task.verifier is not None]
    if verified:
        refuse_unproven_verified(config, verified)
    pairs = references_to_prove(config, [task for task in tasks if task.verifier is None])
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


def refuse_unproven_verified(config: RunConfig, tasks: Sequence[Task]) -> None:
    """Tasks graded by their own verifier (imported Harbor tasks) play only in a harness
    that plays them, and each is proven before any run: its oracle (solution/solve.sh)
    then its verifier give reward 1, its verifier with nothing done gives 0."""
    from piexp.harness.base import harness_class, make_harness

    family = tasks[0].family
    languages = list(dict.fromkeys([*config.train_languages, *config.eval_languages]))
    if len(languages) > 1:
        raise UserError(
            f"family {family!r} holds Harbor tasks, whose instructions say what to use; the run's language is only "
            f"a label for them, so with lang/eval_lang {', '.join(languages)} each would play once per language. "
            f"Run them with one language (lang={languages[0]} and no other eval_lang)."
        )
    if not harness_class(config.harness).plays_verified_tasks:
        raise UserError(
            f"family {family!r} holds Harbor tasks, graded by their own tests/test.sh after an agent worked in a "
            f"shell at their working folder; harness={config.harness.name} plays piexp's workspace tasks only "
            "(four tools, an integer answer). Run them with harness=pi, Pi's general shell being what such tasks "
            "expect (docs/harbor.md#importing-tasks)."
        )

    async def prove() -> list[str]:
        harness = make_harness(config.harness)
        try:
            return await harness.prove_verified(tasks, config)
        finally:
            await harness.aclose()

    problems = asyncio.run(prove())
    if problems:
        raise UserError(
            f"{len(problems)} of the {len(tasks)} Harbor tasks of this run are not proven solvable, so the run "
            f"would spend its budget on them: {'; '.join(problems)}. Fix each task's solution/solve.sh or "
            "tests/test.sh (or leave it out of the folder)."
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
