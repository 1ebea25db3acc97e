"""piexp tasks as Harbor task folders: one folder per task and language, and the
`dataset.toml` pinning each by Harbor's content digest (`piexp.harbor.digest`).

A folder holds:
    instruction.md         piexp's instruction, files and command, and how the answer is checked
    task.toml              schema 1.4: [task] name and version, [metadata] (family, params,
                           seed, split, language, piexp's task digest), [verifier], [agent],
                           [environment] (no network, resources)
    environment/Dockerfile the language's base image, the workspace copied to /app
    environment/workspace/ the task's files
    solution/solve.sh      the reference program (piexp.harbor.scripts)
    tests/test.sh          piexp's binary reward into reward.json (piexp.harbor.scripts)

Every byte is a function of the task and the language: no time, path or machine enters a
file, so the digests are the same wherever the export runs."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.config.schema import LanguageSettings
from piexp.languages import LANGUAGES
from piexp.errors import UserError
from piexp.harbor.digest import task_folder_digest
from piexp.harbor.scripts import ANSWER_FILE, RUN_TIMEOUT_S, WORKDIR, solve_script, test_script
from piexp.harbor.toml_text import table_text, value_text
from piexp.tasks import Task, task_reference
from piexp.tasks.core import canonical_json

SCHEMA_VERSION = "1.4"
# The org of every exported task's and dataset's name (Harbor names are `org/name`).
ORG = "piexp"
TASK_VERSION = "1.0.0"
DATASET_FILE = "dataset.toml"
AGENT_TIMEOUT_S = 900.0
VERIFIER_TIMEOUT_S = 300.0
CPUS = 1
MEMORY_MB = 2048
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class ExportedTask:
    folder: str  # relative to the export's folder
    name: str  # Harbor's `org/name`
    digest: str  # Harbor's content digest, `sha256:<hex>`


def folder_name(task: Task, language: str) -> str:
    """The folder's name, also the name part of Harbor's `org/name`: letters, digits and
    `._-`, starting with a letter or digit."""
    name = _NAME_UNSAFE.sub("-", f"{task.task_id}-{language}")
    return name if name[0].isalnum() else f"t{name}"


def instruction_text(task: Task, language: str, spec: LanguageSettings) -> str:
    """piexp's prompt for the task, with the working folder, the stated-answer file and
    how the verifier checks the answer (the agent's final message is not seen by it)."""
    files = "\n".join(f"- `{name}`" for name in sorted(task.files))
    return f"""Use {language} to complete this workspace task.

{task.instruction}

Available files (in `{WORKDIR}`, the working folder):
{files}

Write `{spec.filename}` in `{WORKDIR}`. Execute it with exactly `{spec.command}`. Use the execution output to verify the result, then write the final integer into `{ANSWER_FILE}` in `{WORKDIR}`.

How the answer is checked: after you finish, `{spec.command}` is run in `{WORKDIR}` without network (at most {RUN_TIMEOUT_S} seconds). The task is solved (reward 1) when `{spec.filename}` exists, that run exits 0, the last non-empty line it prints is the answer, and the last integer in `{ANSWER_FILE}` is the answer; otherwise the reward is 0.
"""


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _params_entry(task: Task) -> dict[str, Any]:
    """The params as a TOML table, or as their canonical JSON where TOML has no form for
    a value (a null)."""
    params = _plain(task.params)
    try:
        value_text(params)
    except (TypeError, ValueError):
        return {"params_json": canonical_json(params)}
    return {"params": params}


def task_toml(task: Task, language: str, seed: int) -> str:
    name = f"{ORG}/{folder_name(task, language)}"
    sections = [
        f"schema_version = {value_text(SCHEMA_VERSION)}\n",
        table_text(
            "task",
            {
                "name": name,
                "version": TASK_VERSION,
                "description": f"piexp family {task.family}, task {task.task_id}, in {language}",
                "keywords": ["piexp", task.family, language],
            },
        ),
        table_text(
            "metadata",
            {
                "family": task.family,
                "task_id": task.task_id,
                "split": task.split,
                "language": language,
                "seed": seed,
                **_params_entry(task),
                "piexp_task_digest": task.task_digest,
            },
        ),
        table_text("verifier", {"timeout_sec": VERIFIER_TIMEOUT_S, "network_mode": "no-network"}),
        table_text("agent", {"timeout_sec": AGENT_TIMEOUT_S}),
        table_text(
            "environment",
            {"network_mode": "no-network", "cpus": CPUS, "memory_mb": MEMORY_MB, "workdir": WORKDIR},
        ),
    ]
    return "\n".join(sections)


def dockerfile(language: str) -> str:
    return f"""FROM {LANGUAGES[language].base_image}
WORKDIR {WORKDIR}
COPY workspace/ {WORKDIR}/
"""


def _write(path: Path, text: str, *, executable: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    os.chmod(path, 0o755 if executable else 0o644)


def _workspace_path(root: Path, name: str) -> Path:
    path = (root / name).resolve()
    if not path.is_relative_to(root.resolve()) or path == root.resolve():
        raise UserError(f"task file name {name!r} leaves the workspace; it cannot be exported")
    return path


def write_task(folder: Path, task: Task, language: str, spec: LanguageSettings, seed: int, reference: str) -> None:
    """One Harbor task folder for `task` in `language` (the folder must not exist)."""
    folder.mkdir(parents=True)
    _write(folder / "instruction.md", instruction_text(task, language, spec))
    _write(folder / "task.toml", task_toml(task, language, seed))
    _write(folder / "environment" / "Dockerfile", dockerfile(language))
    workspace = folder / "environment" / "workspace"
    workspace.mkdir(parents=True)
    for name in sorted(task.files):
        _write(_workspace_path(workspace, name), task.files[name])
    _write(folder / "solution" / "solve.sh", solve_script(reference, spec.filename, spec.command), executable=True)
    _write(folder / "tests" / "test.sh", test_script(task.answer, spec.filename, spec.command), executable=True)


def dataset_toml(name: str, description: str, exported: Sequence[ExportedTask]) -> str:
    tasks = "\n".join(table_text("tasks", {"name": t.name, "digest": t.digest}, array=True) for t in exported)
    head = table_text("dataset", {"name": f"{ORG}/{name}", "description": description})
    return f"schema_version = {value_text('1.0')}\n\n{head}\n{tasks}"


def prepare_out(out: Path, replace: bool) -> None:
    """An export writes into an empty or new folder; a folder with anything in it is
    refused unless `replace`, which empties it first."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; name a new or empty folder.")
    if out.is_dir() and any(out.iterdir()):
        if not replace:
            raise UserError(
                f"--out {out} is not empty; an export writes into a new or empty folder. Add --replace to "
                "delete what it holds and write the export there, or name another folder."
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def export_tasks(
    out: Path,
    splits: Sequence[tuple[Sequence[Task], Mapping[str, LanguageSettings]]],
    seed: int,
    dataset_name: str,
    *,
    replace: bool = False,
) -> list[ExportedTask]:
    """Write every task of each split in each of its languages under `out`, and
    `out/dataset.toml` listing them all. Every task's reference program is found first,
    so a task without one is refused before `out` is touched."""
    plan = [
        (task, language, spec, task_reference(task, language))
        for tasks, languages in splits
        for task in tasks
        for language, spec in languages.items()
    ]
    prepare_out(out, replace)
    exported = []
    for task, language, spec, reference in plan:
        relative = folder_name(task, language)
        write_task(out / relative, task, language, spec, seed, reference)
        exported.append(ExportedTask(relative, f"{ORG}/{relative}", task_folder_digest(out / relative)))
    families = sorted({task.family for task, *_ in plan})
    languages_used = list(dict.fromkeys(language for _, language, *_ in plan))
    description = f"piexp tasks of {', '.join(families)} in {', '.join(languages_used)} (seed {seed})"
    _write(out / DATASET_FILE, dataset_toml(dataset_name, description, exported))
    return exported
