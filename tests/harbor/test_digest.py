"""piexp's Harbor digest is Harbor's: on Harbor's own template task (tests/harbor/fixtures)
and on a copy with the files Harbor leaves out (a `__pycache__`, `*~`, `.DS_Store`, an empty
`.harborignore`, a folder outside environment/tests/solution/steps), the digests equal the
ones Harbor 0.25.0's `Packager.compute_content_hash` printed for the same folders, pinned
here so the comparison runs without Harbor; a `.gitignore` decides what is hashed as in
Harbor. A folder whose `.harborignore` rules would change what Harbor hashes is refused
rather than digested differently."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from piexp.errors import UserError
from piexp.harbor.digest import digested_files, task_folder_digest
from tests.harbor.harbor_rules import harbor_digest

TEMPLATE = Path(__file__).parent / "fixtures" / "template-task"
# Printed by Harbor 0.25.0 (Python 3.12): Packager.compute_content_hash(folder)[0].
HARBOR_TEMPLATE_DIGEST = "sha256:aa812c7b631f2d973211026b034b11157ef9ebdc577956d2e4a1d9b4612a59ce"
HARBOR_WITH_IGNORED_DIGEST = "sha256:13007a090fae0987c491339e78a1c8d3d50ecd0c4545f8cd6e786d7009fcb6b5"


def _with_ignored_files(tmp_path: Path) -> Path:
    folder = tmp_path / "task"
    shutil.copytree(TEMPLATE, folder)
    (folder / "solution" / "__pycache__").mkdir()
    (folder / "solution" / "__pycache__" / "solve.cpython-312.pyc").write_bytes(b"x")
    (folder / "tests" / "test.sh~").write_bytes(b"y")
    (folder / "environment" / ".DS_Store").write_bytes(b"z")
    (folder / "tests" / ".harborignore").write_bytes(b"")
    (folder / "other").mkdir()
    (folder / "other" / "notes.txt").write_bytes(b"hi\n")
    (folder / "README.md").write_bytes(b"readme\n")
    return folder


def test_the_digest_of_harbors_template_task_is_the_one_harbor_computes(tmp_path: Path) -> None:
    assert task_folder_digest(TEMPLATE) == harbor_digest(TEMPLATE) == HARBOR_TEMPLATE_DIGEST
    folder = _with_ignored_files(tmp_path)
    assert digested_files(folder) == [
        "README.md", "environment/Dockerfile", "instruction.md", "solution/solve.sh", "task.toml",
        "tests/Dockerfile", "tests/test.sh",
    ]  # fmt: skip
    assert task_folder_digest(folder) == harbor_digest(folder) == HARBOR_WITH_IGNORED_DIGEST


def test_ignore_rules_of_a_harborignore_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "task"
    shutil.copytree(TEMPLATE, folder)
    (folder / "tests" / ".harborignore").write_text("Dockerfile\n")
    with pytest.raises(UserError, match="ignore rules"):
        task_folder_digest(folder)


# Printed by Harbor 0.25.0 for the template task with a .gitignore of one line, `Dockerfile`.
HARBOR_GITIGNORED_DIGEST = "sha256:d313b3d3b8b0012f0fd9be1375f5afcd30e5ae88fb80bcccfdaa0c66de80ba3d"


def test_a_gitignore_decides_what_is_hashed_as_in_harbor(tmp_path: Path) -> None:
    """Harbor matches a task's .gitignore patterns (in place of its default ignores) with
    pathspec; so does piexp: every task `harbor tasks init` makes has one."""
    folder = tmp_path / "task"
    shutil.copytree(TEMPLATE, folder)
    (folder / ".gitignore").write_text("Dockerfile\n")
    assert digested_files(folder) == ["instruction.md", "solution/solve.sh", "task.toml", "tests/test.sh"]
    assert task_folder_digest(folder) == HARBOR_GITIGNORED_DIGEST
    # The .gitignore `harbor tasks init` writes ignores none of the task's files.
    (folder / ".gitignore").write_text("# Git\n.git/\n\n# Python\n__pycache__/\n*.pyc\n.venv/\n")
    assert task_folder_digest(folder) == HARBOR_TEMPLATE_DIGEST


# The digest of the folder below as piexp exports it today: the same on every machine.
# An intended change of the exported format changes it (and every pinned dataset with it).
EXPORTED_DIGEST = "sha256:28e7e713e00e5a87356b427356acda2ea57f6a60792302c4de2f4ae44e35f54a"


def test_an_exported_folder_has_a_pinned_digest_on_every_machine(tmp_path: Path) -> None:
    from piexp.config.schema import LanguageSettings
    from piexp.harbor.export import write_task
    from piexp.tasks import Task

    task = Task(
        task_id="eval-demo-0-00000", family="demo", split="eval", answer="3",
        instruction="Print the sum of the numbers in `numbers.txt`.", files={"numbers.txt": "1\n2\n"},
        params={"n": 2, "names": ["a", "b"], "nested": {"x": 1.5}},
    )  # fmt: skip
    spec = LanguageSettings(runtimes=["python", "python3"], filename="solution.py")
    write_task(tmp_path / "t", task, "python", spec, 7, "print(sum(int(l) for l in open('numbers.txt')))\n")
    assert task_folder_digest(tmp_path / "t") == harbor_digest(tmp_path / "t") == EXPORTED_DIGEST
