"""Harbor's content digest of a task folder, the pin a `dataset.toml` gives each task.

The rule is Harbor's (`harbor.publisher.packager.Packager.compute_content_hash`, 0.25.0):
the files it publishes are `task.toml`, `instruction.md`, `README.md` and `trajectory.json`
at the top (where present) and every file under `environment/`, `tests/`, `solution/` and
`steps/`, less the ignored ones (without a `.gitignore`: `__pycache__/`, `*.pyc`,
`.DS_Store`, `*.swp`, `*.swo`, `*~`; with one, its gitignore patterns instead, matched by
`pathspec` as Harbor matches them; `.harborignore` files themselves); sorted by their
relative POSIX path, each adds the line `relpath\\0sha256(file bytes)\\n` to one SHA-256.
Only bytes and relative paths enter it, never modes, times or the folder's own path, so a
folder's digest is the same on every machine."""

from __future__ import annotations

import fnmatch
import hashlib
from pathlib import Path

from piexp.errors import UserError

DIGEST_PREFIX = "sha256:"
TOP_FILES = ("task.toml", "instruction.md", "README.md", "trajectory.json")
TREES = ("environment", "tests", "solution", "steps")
# Harbor's ignores when a task has no .gitignore (packager.DEFAULT_IGNORES).
_IGNORED_NAMES = ("*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")
_IGNORED_FOLDER = "__pycache__"
_HARBOR_IGNORE = ".harborignore"


def _ignored(relative: str) -> bool:
    parts = relative.split("/")
    if _IGNORED_FOLDER in parts[:-1]:
        return True
    return parts[-1] == _HARBOR_IGNORE or any(fnmatch.fnmatchcase(parts[-1], pattern) for pattern in _IGNORED_NAMES)


def _refuse_ignore_files(folder: Path) -> None:
    """A `.harborignore` with rules changes which files Harbor hashes by rules of its own
    (inherited per folder), which piexp does not reimplement: such a folder is refused
    rather than given a digest Harbor would not."""
    for tree in TREES:
        for path in sorted((folder / tree).rglob(_HARBOR_IGNORE)) if (folder / tree).is_dir() else []:
            if path.read_text(encoding="utf-8").strip():
                raise UserError(
                    f"Harbor task folder {folder} has ignore rules in {path.relative_to(folder)}; piexp computes "
                    "Harbor's digest only of folders without them."
                )


def digested_files(folder: Path) -> list[str]:
    """The relative paths Harbor hashes, in its order."""
    folder = Path(folder)
    _refuse_ignore_files(folder)
    found = [name for name in TOP_FILES if (folder / name).exists()]
    for tree in TREES:
        root = folder / tree
        if not root.is_dir():
            continue
        for path in root.rglob("*"):
            if path.is_file():
                found.append(path.relative_to(folder).as_posix())
    gitignore = folder / ".gitignore"
    if gitignore.exists():
        import pathspec  # Harbor's own matcher of gitignore patterns

        spec = pathspec.PathSpec.from_lines("gitignore", gitignore.read_text().splitlines())
        return sorted(relative for relative in found if not spec.match_file(relative)
                      and relative.split("/")[-1] != _HARBOR_IGNORE)  # fmt: skip
    return sorted(relative for relative in found if not _ignored(relative))


def task_folder_digest(folder: Path) -> str:
    """`sha256:<hex>`: Harbor's content digest of the task folder."""
    outer = hashlib.sha256()
    for relative in digested_files(folder):
        inner = hashlib.sha256((Path(folder) / relative).read_bytes()).hexdigest()
        outer.update(f"{relative}\0{inner}\n".encode())
    return DIGEST_PREFIX + outer.hexdigest()
