"""Harbor task folders as a piexp family (docs/harbor.md#importing-tasks).

The YAML that selects them names `HarborTaskFamily` with `_target_` and gives `path`: a
folder of task folders, one task folder, or a `dataset.toml` (or a folder holding one),
whose `[[tasks]]` name the folders beside it (by the part of `org/name` after the `/`)
and pin each by Harbor's digest; a folder whose digest is not the one listed is refused
by name. Relative paths are taken from the YAML's folder, as a task file's are.

Every task's Harbor digest is its task digest (piexp.tasks.core.Task). Its split is
`[metadata] split` where a task says (piexp's exports do), else a stable choice from its
digest and `eval_percent`; identical folders are refused, so no task is in both splits.
A task piexp's sandbox cannot give what it asks (piexp.harbor.task_folder) is refused
with its reasons before anything runs; `skip_refused=true` leaves such tasks out instead
(each named, with its reasons, in the run's manifest) and plays the others.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.harbor.task_folder import ReadTask, digest_hex, read_task_folder
from piexp.tasks.core import Task, canonical_json, sha256_hex
from piexp.tasks.task_file import TaskFileFamily, split_of, task_file_path

DATASET_FILE = "dataset.toml"


@dataclass(frozen=True)
class HarborTasksParams:
    path: str = ""  # a folder of Harbor task folders, one task folder, or a dataset.toml
    eval_percent: int = 20  # percent of the tasks without [metadata] split assigned to eval [0..100]
    skip_refused: bool = False  # leave out the tasks piexp's sandbox cannot play (else refuse the import)


@dataclass(frozen=True)
class LoadedHarborTasks:
    path: Path
    tasks: tuple[Task, ...]
    refused: tuple[tuple[str, tuple[str, ...]], ...]  # (task name, reasons) left out


class HarborTaskFamily(TaskFileFamily):
    """A family whose tasks are Harbor task folders (see the module docstring)."""

    params_type = HarborTasksParams  # type: ignore[assignment]
    kind = "Harbor family"
    path_meaning = "a folder of Harbor task folders, one task folder, or a dataset.toml"
    # Its tasks' oracle is their own solution/solve.sh, their grade their tests/test.sh.
    graded_by_verifier = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.summary = "Harbor task folders, graded by their own verifiers"
        self._harbor: LoadedHarborTasks | None = None

    @property
    def source_file(self) -> Path:
        return self._harbor.path if self._harbor is not None else Path("<no Harbor tasks loaded>")

    def check_params(self, params: HarborTasksParams) -> None:
        if not isinstance(params.skip_refused, bool):
            raise UserError(
                f"{self.kind} {self.name!r}: skip_refused must be true or false, got {params.skip_refused!r}"
            )

    def _loaded(self, params: HarborTasksParams) -> LoadedHarborTasks:  # type: ignore[override]
        path = task_file_path(self.name, params.path)
        self._harbor = load_harbor_tasks(self.name, str(path), params.eval_percent, params.skip_refused,
                                         _fingerprint(path))  # fmt: skip
        return self._harbor

    def reference_languages(self) -> tuple[str, ...]:
        return ()

    def reference(self, language: str, task_id: str | None = None) -> str:
        raise UserError(
            f"task {task_id} of Harbor family {self.name!r} has no reference program: its oracle is its own "
            "solution/solve.sh, and its verifier grades it (docs/harbor.md#importing-tasks)."
        )

    def origin(self) -> dict[str, Any]:
        loaded = self._harbor
        return {
            "kind": "harbor",
            "path": str(self.source_file),
            "refused": {name: list(reasons) for name, reasons in loaded.refused} if loaded else {},
        }

    def digest(self, params: HarborTasksParams) -> dict[str, str]:  # type: ignore[override]
        loaded = self._loaded(params)
        return {
            "code": sha256_hex(canonical_json(sorted(task.task_digest for task in loaded.tasks))),
            "references": sha256_hex(canonical_json([])),
            "params": sha256_hex(canonical_json(dataclasses.asdict(params))),
        }

    def file_digests(self) -> dict[str, dict[str, str]]:
        """Each admitted task's Harbor digest under `task NAME`: `reproduce` names the task
        whose folder changed."""
        loaded = self._harbor
        return {
            f"task {task.verifier.name}": {"file": task.verifier.folder, "sha256": task.verifier.digest}
            for task in (loaded.tasks if loaded else ())
        }

    def params_help(self) -> str:
        return (
            f"# {self.name}: {self.summary}\n\nSet with family.{self.name}.NAME=VALUE:\n"
            f"- path: a folder of Harbor task folders, one task folder, or a dataset.toml (now {self.source_file})\n"
            "- eval_percent: percent of the tasks without [metadata] split assigned to eval (0..100)\n"
            "- skip_refused: leave out the tasks piexp's sandbox cannot play, instead of refusing the import\n"
        )


def _fingerprint(path: Path) -> str:
    """What changes when a task folder under `path` changes (the load's cache key)."""
    root = path.parent if path.is_file() else path
    if not root.is_dir():
        return ""
    parts = []
    for member in sorted(root.rglob("*")):
        try:
            stat = member.stat()
        except OSError:
            continue
        parts.append(f"{member.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}")
    return sha256_hex("\n".join(parts))


def task_folders(family: str, path: Path) -> tuple[list[Path], dict[str, str]]:
    """The task folders `path` means, and (for a dataset) each folder's pinned digest."""
    if not path.exists():
        raise UserError(
            f"Harbor family {family!r}: {path} does not exist; set family.{family}.path to a folder of Harbor task "
            "folders, one task folder, or a dataset.toml."
        )
    manifest = path if path.is_file() else path / DATASET_FILE
    if manifest.is_file():
        return _dataset_folders(family, manifest)
    if (path / "task.toml").exists() or (path / "instruction.md").exists():
        return [path], {}
    folders = [
        child
        for child in sorted(path.iterdir())
        if child.is_dir() and any((child / name).exists() for name in ("task.toml", "instruction.md", "tests"))
    ]
    if not folders:
        raise UserError(f"Harbor family {family!r}: {path} holds no task folder (a folder with task.toml).")
    return folders, {}


def _dataset_folders(family: str, manifest: Path) -> tuple[list[Path], dict[str, str]]:
    try:
        data = tomllib.loads(manifest.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UserError(f"Harbor family {family!r}: {manifest} is not valid TOML ({error}).") from None
    entries = data.get("tasks")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"Harbor family {family!r}: {manifest} lists no [[tasks]] (each with name and digest).")
    folders, pinned = [], {}
    for entry in entries:
        name, digest = (entry.get("name"), entry.get("digest")) if isinstance(entry, dict) else (None, None)
        if not isinstance(name, str) or "/" not in name or not isinstance(digest, str):
            raise UserError(
                f"Harbor family {family!r}: {manifest} has a [[tasks]] entry {entry!r}; each needs name = "
                '"org/name" and digest = "sha256:...".'
            )
        folder = manifest.parent / name.split("/", 1)[1]
        folders.append(folder)
        pinned[str(folder.resolve())] = digest
    return folders, pinned


@cache
def load_harbor_tasks(family: str, path: str, eval_percent: int, skip_refused: bool, _key: str) -> LoadedHarborTasks:
    """The admitted tasks under `path` (read once per content: `_key` changes with it)."""
    folders, pinned = task_folders(family, Path(path))
    read: list[ReadTask] = []
    for folder in folders:
        if not folder.is_dir():
            raise UserError(
                f"Harbor family {family!r}: {path} lists the task {folder.name}, but {folder} is no folder."
            )
        task = read_task_folder(folder)
        want = pinned.get(str(folder.resolve()))
        if want is not None and want != task.digest:
            raise UserError(
                f"Harbor family {family!r}: task {task.name} ({folder}) has digest {task.digest}, but {path} pins "
                f"{want}: the folder changed since the dataset was written. Restore it, or pin its new digest."
            )
        read.append(task)
    refused = tuple((task.name, task.reasons) for task in read if task.verifier is None)
    if refused and not skip_refused:
        listed = "; ".join(f"{name}: {', '.join(reasons)}" for name, reasons in refused)
        raise UserError(
            f"Harbor family {family!r}: {len(refused)} of the {len(read)} tasks in {path} cannot play in piexp's "
            f"sandbox: {listed}. Fix them, or set family.{family}.skip_refused=true to play the others "
            "(docs/harbor.md#importing-tasks lists what is admitted)."
        )
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for found in read:
        if found.verifier is None:
            continue
        if found.digest in seen:
            raise UserError(
                f"Harbor family {family!r}: tasks {seen[found.digest]} and {found.name} are identical (digest "
                f"{found.digest}); remove one."
            )
        seen[found.digest] = found.name
        split = found.metadata.get("split")
        if split not in ("train", "eval"):
            split = split_of(found.digest, eval_percent, salt="piexp.harbor.split.v1")
        short = found.name.rsplit("/", 1)[-1].removeprefix(f"{split}-")
        tasks.append(
            Task(
                task_id=f"{split}-{family}-{short}",
                family=family,
                split=split,
                instruction=found.instruction,
                files=found.files,
                answer="",
                params={"name": found.name, "digest": digest_hex(found.digest)},
                verifier=found.verifier,
            )
        )
    if not tasks:
        raise UserError(
            f"Harbor family {family!r}: none of the {len(read)} tasks in {path} can play in piexp's sandbox."
        )
    return LoadedHarborTasks(path=Path(path), tasks=tuple(tasks), refused=refused)
