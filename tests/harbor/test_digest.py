"""piexp's Harbor digest is Harbor's: on Harbor's own template task (tests/harbor/fixtures)
and on a copy with the files Harbor leaves out (a `__pycache__`, `*~`, `.DS_Store`, an empty
`.harborignore`, a folder outside environment/tests/solution/steps), the digests equal the
ones Harbor 0.25.0's `Packager.compute_content_hash` printed for the same folders, pinned
here so the comparison runs without Harbor. A folder whose `.gitignore` or `.harborignore`
rules would change what Harbor hashes is refused rather than digested differently."""

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


@pytest.mark.parametrize("ignore_file", [".gitignore", "tests/.harborignore"])
def test_ignore_rules_that_change_what_harbor_hashes_are_refused(tmp_path: Path, ignore_file: str) -> None:
    folder = tmp_path / "task"
    shutil.copytree(TEMPLATE, folder)
    (folder / ignore_file).write_text("Dockerfile\n")
    with pytest.raises(UserError, match="ignore|gitignore"):
        task_folder_digest(folder)


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
