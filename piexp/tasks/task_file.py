"""Task files: a fixed set of tasks read from a JSON Lines file (or a Parquet file, or a
Hugging Face `datasets` folder, when pyarrow / datasets are installed) instead of a generator.
Each line is one task: `id` (unique), `instruction`, `files` (name -> content), `answer`
(an integer within +/-2^53), and optionally `references` (language -> program source)
and `split` (`train` or `eval`). A task without `split` is assigned one by a stable
SHA-256 of its workspace files and the declared `eval_percent`, so tasks that share a
workspace always land in the same split and the assignment never depends on the file's
order or on the process. Everything wrong with the file (its encoding, a line that is not
JSON, a missing field, a non-integer answer, repeated ids or contents, a train/eval
overlap, an empty split) is refused when the run is validated, naming the line or ids.
The YAML that selects a task file names `TaskFileFamily` with `_target_` and gives
`path` (absolute, relative to the YAML's folder, or `pkg://PACKAGE/FILE` inside an
importable package) and `eval_percent`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.languages import LANGUAGES
from piexp.tasks.core import MAX_SAFE_INTEGER, Task, canonical_json, sha256_hex
from piexp.tasks.family import check_split
from piexp.tasks.overlap import check_split_overlap

REQUIRED_FIELDS = ("id", "instruction", "files", "answer")
OPTIONAL_FIELDS = ("references", "split")


@dataclass(frozen=True)
class TaskFileParams:
    path: str = ""  # the task file: absolute, relative to its YAML's folder, or pkg://PACKAGE/FILE
    eval_percent: int = 20  # percent of the tasks without a `split` field assigned to eval [0..100]


@dataclass(frozen=True)
class LoadedTaskFile:
    path: Path
    sha256: str
    # Every task of the file, in file order, with its split assigned.
    tasks: tuple[Task, ...]
    # task_id -> language -> reference source
    references: Mapping[str, Mapping[str, str]]


class TaskFileFamily:
    """A family whose tasks are the lines of a JSON Lines file (see the module docstring)."""

    params_type = TaskFileParams
    limits: Mapping[str, tuple[int, int]] = {"eval_percent": (0, 100)}
    # How its messages name the kind, and what its `path` must be (a subclass reads another format).
    kind = "task-file family"
    path_meaning = "the JSON Lines file of its tasks"

    def __init__(self, name: str) -> None:
        self.name = name
        self.summary = "tasks read from a JSON Lines file"
        self._current: LoadedTaskFile | None = None

    @property
    def source_file(self) -> Path:
        return self._current.path if self._current is not None else Path("<no task file loaded>")

    @property
    def defaults(self) -> Any:
        return self.params_type()

    def param_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.params_type))

    def make_params(self, overrides: Mapping[str, Any] | None = None) -> TaskFileParams:
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.param_names()))
        if unknown:
            raise UserError(
                f"{self.kind} {self.name!r} has no parameter(s) {', '.join(unknown)}; "
                f"its parameters are: {', '.join(self.param_names())}"
            )
        params = dataclasses.replace(self.defaults, **overrides)
        if not isinstance(params.path, str) or not params.path:
            raise UserError(f"{self.kind} {self.name!r} needs family.{self.name}.path: {self.path_meaning}.")
        percent = params.eval_percent
        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            raise UserError(f"{self.kind} {self.name!r}: eval_percent must be an integer in [0, 100], got {percent!r}")
        self.check_params(params)
        self._loaded(params)
        return params

    def check_params(self, params: Any) -> None:
        """Refuse a value of a parameter a subclass adds (called before the tasks load)."""

    def _loaded(self, params: TaskFileParams) -> LoadedTaskFile:
        loaded = load_task_file(self.name, str(task_file_path(self.name, params.path)), params.eval_percent)
        self._current = loaded
        return loaded

    def tasks(self, split: str, count: int, seed: int, params: TaskFileParams) -> list[Task]:
        """The first `count` tasks of `split`, in file order (the seed does not choose them)."""
        check_split(split)
        return [task for task in self._loaded(params).tasks if task.split == split][:count]

    def reference_languages(self) -> tuple[str, ...]:
        """The languages every task of the file has a reference in (none: no references)."""
        if self._current is None or not self._current.tasks:
            return ()
        per_task = [set(self._current.references.get(task.task_id, {})) for task in self._current.tasks]
        common = set.intersection(*per_task)
        return tuple(name for name in LANGUAGES if name in common)

    def reference(self, language: str, task_id: str | None = None) -> str:
        loaded = self._current
        source = (loaded.references.get(task_id or "", {}) if loaded is not None else {}).get(language)
        if source is None:
            raise UserError(
                f"task {task_id} of task-file family {self.name!r} has no {language} reference "
                f'(give it a "references": {{"{language}": ...}} entry in {self.source_file}).'
            )
        return source

    def origin(self) -> dict[str, Any]:
        loaded = self._current
        return {"kind": "task_file", "path": str(self.source_file), "sha256": loaded.sha256 if loaded else None}

    def digest(self, params: TaskFileParams) -> dict[str, str]:
        loaded = self._loaded(params)
        return {
            "code": loaded.sha256,
            "references": sha256_hex(canonical_json(loaded.references)),
            "params": sha256_hex(canonical_json(dataclasses.asdict(params))),
        }


def split_of(key: str, eval_percent: int, salt: str = "piexp.task_file.split.v1") -> str:
    """A task's split from a stable SHA-256 of its `key` (a digest) and `salt`: the same on
    every machine, whatever the order tasks are read in."""
    bucket = int(sha256_hex(f"{salt}:{key}")[:8], 16) % 100
    return "eval" if bucket < eval_percent else "train"


PACKAGE_PREFIX = "pkg://"


def task_file_path(family: str, path: str) -> Path:
    """Where `path` is: `pkg://PACKAGE/FILE` is FILE inside an importable package (a task
    file an installed distribution ships as package data); anything else a path,
    relative ones from the folder piexp runs in (the config layer has already taken one
    given by a YAML from that YAML's folder)."""
    if not path.startswith(PACKAGE_PREFIX):
        return Path(path).expanduser().resolve()
    import importlib.util

    package, _, inside = path.removeprefix(PACKAGE_PREFIX).partition("/")
    try:
        spec = importlib.util.find_spec(package) if package else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations or not inside:
        raise UserError(
            f"task-file family {family!r}: path {path} must be pkg://PACKAGE/FILE with PACKAGE an importable "
            "package (installed, or on PYTHONPATH) and FILE its task file, e.g. pkg://my_tasks/data/tasks.jsonl."
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / inside
        if candidate.exists():
            return candidate.resolve()
    return (Path(next(iter(spec.submodule_search_locations))) / inside).resolve()


def load_task_file(family: str, path: str, eval_percent: int) -> LoadedTaskFile:
    """The file's tasks, read once per content (the cache key is the content's digest)."""
    file = Path(path)
    if not file.exists():
        raise UserError(
            f"task-file family {family!r}: {file} does not exist; set family.{family}.path to the JSON Lines "
            "file of its tasks (an absolute path works from any folder)."
        )
    try:
        digest = _content_digest(file)
    except OSError as error:
        raise UserError(f"task-file family {family!r}: {file} cannot be read ({error}).") from None
    return _parse(family, file, digest, eval_percent)


def _content_digest(file: Path) -> str:
    """SHA-256 of the file, or of every file of a folder (names and bytes, sorted)."""
    if not file.is_dir():
        return hashlib.sha256(file.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    for member in sorted(path for path in file.rglob("*") if path.is_file()):
        digest.update(str(member.relative_to(file)).encode() + b"\0" + member.read_bytes() + b"\0")
    return digest.hexdigest()


def _jsonl_entries(file: Path, fix: str) -> list[tuple[int, str, Any]]:
    """(line number, where, decoded JSON) of every non-blank line."""
    entries = []
    for number, raw in enumerate(file.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        where = f"{file} line {number}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UserError(
                f"{where} is not UTF-8 (byte {raw[error.start]:#04x} at column {error.start + 1}); "
                "save the task file as UTF-8."
            ) from None
        try:
            entries.append((number, where, json.loads(text)))
        except json.JSONDecodeError as error:
            raise UserError(f"{where} is not valid JSON ({error.msg} at column {error.colno}); {fix}.") from None
    return entries


def _table_entries(file: Path) -> list[tuple[int, str, Any]]:
    """Rows of a Parquet file or a Hugging Face `datasets` folder (`save_to_disk`), when
    pyarrow / datasets are installed; `files` and `references` may be structs, maps or
    JSON strings."""
    try:
        if file.is_dir():
            import datasets

            rows = list(datasets.load_from_disk(str(file)))
        else:
            import pyarrow.parquet as parquet

            rows = parquet.read_table(file).to_pylist()
    except ImportError as error:
        raise UserError(
            f"{file}: reading it needs {error.name} (pip install {error.name}); or give the tasks as JSON Lines."
        ) from None
    except Exception as error:  # the libraries' own errors for a file they cannot read
        raise UserError(
            f"{file} cannot be read as a {'datasets folder' if file.is_dir() else 'Parquet file'} ({error})."
        ) from None
    entries = []
    for number, row in enumerate(rows, start=1):
        entry = {key: value for key, value in dict(row).items() if value is not None}
        for key in ("files", "references"):
            value = entry.get(key)
            if isinstance(value, str):
                try:
                    entry[key] = json.loads(value)
                except json.JSONDecodeError:
                    pass  # refused below as not an object
            elif isinstance(value, list) and all(isinstance(item, (list, tuple)) and len(item) == 2 for item in value):
                entry[key] = dict(value)  # a Parquet map column reads back as (key, value) pairs
        entries.append((number, f"{file} row {number}", entry))
    return entries


@cache
def _parse(family: str, file: Path, sha256: str, eval_percent: int) -> LoadedTaskFile:
    fix = "each line must be one JSON object with id, instruction, files, answer (and optionally references, split)"
    tasks: list[Task] = []
    references: dict[str, dict[str, str]] = {}
    lines_of_id: dict[str, int] = {}
    ids_of_digest: dict[str, str] = {}
    tabular = file.is_dir() or file.suffix == ".parquet"
    for number, where, entry in _table_entries(file) if tabular else _jsonl_entries(file, fix):
        if not isinstance(entry, dict):
            raise UserError(f"{where} is a JSON {type(entry).__name__}, not an object; {fix}.")
        missing = [key for key in REQUIRED_FIELDS if key not in entry]
        if missing:
            raise UserError(f"{where} lacks the field(s) {', '.join(missing)}; {fix}.")
        unknown = sorted(set(entry) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS))
        if unknown:
            raise UserError(f"{where} has unknown field(s) {', '.join(unknown)}; {fix}.")
        task_id = entry["id"]
        if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or not str(task_id).strip():
            raise UserError(f"{where}: id must be a non-empty string or an integer, got {task_id!r}.")
        task_id = str(task_id)
        where = f"{where} (id {task_id})"
        if task_id in lines_of_id:
            unit = "row" if tabular else "line"
            raise UserError(
                f"{file}: id {task_id} appears on {unit} {lines_of_id[task_id]} and again on {unit} {number}; "
                "give every task its own id."
            )
        lines_of_id[task_id] = number
        answer = entry["answer"]
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise UserError(
                f'{where}: answer must be a JSON integer (like 42, not "42" or 4.2), got {json.dumps(answer)}.'
            )
        if not -MAX_SAFE_INTEGER < answer < MAX_SAFE_INTEGER:
            raise UserError(f"{where}: answer {answer} lies outside +/-2^53, which JavaScript cannot hold exactly.")
        instruction = entry["instruction"]
        if not isinstance(instruction, str) or not instruction.strip():
            raise UserError(f"{where}: instruction must be a non-empty string.")
        files = entry["files"]
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise UserError(f"{where}: files must be an object of file name -> text content.")
        if any(not name or name.startswith("/") or ".." in name.split("/") for name in files):
            raise UserError(f"{where}: file names must be relative paths without `..`.")
        task_references = entry.get("references") or {}
        if not isinstance(task_references, dict) or not all(
            isinstance(v, str) and k in LANGUAGES for k, v in task_references.items()
        ):
            raise UserError(
                f"{where}: references must be an object of language ({', '.join(LANGUAGES)}) -> program source."
            )
        split = entry.get("split")
        if split is not None and split not in ("train", "eval"):
            raise UserError(f'{where}: split must be "train" or "eval", got {json.dumps(split)}.')
        probe = Task(task_id=task_id, family=family, split="train", instruction=instruction, files=files, answer="0")
        split = split or split_of(probe.files_digest, eval_percent)
        task = Task(
            task_id=f"{split}-{family}-{task_id}",
            family=family,
            split=split,
            instruction=instruction,
            files=files,
            answer=str(answer),
            params={"id": task_id},
        )
        if task.task_digest in ids_of_digest:
            raise UserError(
                f"{file}: tasks {ids_of_digest[task.task_digest]} and {task_id} ({'row' if tabular else 'line'} "
                f"{number}) are identical; remove one."
            )
        ids_of_digest[task.task_digest] = task_id
        tasks.append(task)
        references[task.task_id] = dict(task_references)
    if not tasks:
        raise UserError(f"{file} holds no tasks; {fix}.")
    train = [task for task in tasks if task.split == "train"]
    evals = [task for task in tasks if task.split == "eval"]
    report = check_split_overlap(train, evals)
    if not report.ok:
        first = (report.digest_overlaps or report.files_overlaps or report.params_overlaps)[0]
        raise UserError(
            f"{file}: eval task {first['eval_task_id']} repeats train task {first['train_task_id']} "
            "(same workspace files); give them the same split, or drop one."
        )
    for name, chosen in (("train", train), ("eval", evals)):
        if not chosen:
            raise UserError(
                f"{file}: no task of its {len(tasks)} falls in the {name} split (eval_percent={eval_percent}); "
                f'mark some lines "split": "{name}" or change family.{family}.eval_percent.'
            )
    return LoadedTaskFile(path=file, sha256=sha256, tasks=tuple(tasks), references=references)
