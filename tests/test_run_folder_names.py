"""A run folder's file names have one home, `piexp/run_folder.py`: no other module of piexp
spells one as a string (a module that owns a file's contents binds its constant to the
name there), so a new run-folder file is one line there, and a renamed one cannot leave a
reader behind."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from piexp.run_folder import RunFolder

PACKAGE = Path(__file__).resolve().parents[1] / "piexp"
NAMES = {value for key, value in vars(RunFolder).items() if key.isupper() and isinstance(value, str)}
# A name that is also an ordinary word of other files (Hydra's own config.yaml of conf/, a
# task's workspace files) is told apart by its folder: these are checked as paths only.
AMBIGUOUS = {".hydra/config.yaml", ".hydra/overrides.yaml", ".hydra", "eval_base", "eval_trained"}


def test_no_module_but_run_files_spells_a_run_folder_file_name() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "run_folder.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if node.value in NAMES - AMBIGUOUS:
                    spelled.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert not spelled, "name these through piexp.run_folder.RunFolder:\n" + "\n".join(spelled)


# A file name as a string: what a run folder's file would be spelled as.
FILE_NAME = re.compile(r"^[\w.{}:-]*\w\.(json|jsonl|jsonl\.gz|md|png|html|yaml)$")
# Modules that spell file names that are not a run folder's, and why.
OTHER_FILES = {
    "piexp/tasks/": "a task's workspace files",
    "piexp/harbor/": "a Harbor task folder's files (task.toml, instruction.md, a verifier's reward.json)",
    "piexp/harness/pi/": "Pi's own files (its models.json, npm's package files)",
    "piexp/tokenizer/": "the tokenizer's files in piexp's cache",
    "piexp/pretrain/": "the learner-local build's files in piexp's cache",
    "piexp/service/tiny_model.py": "the tiny-local model folder's files in piexp's cache",
    "piexp/service/local_venv.py": "the server venv's files in piexp's cache",
    "piexp/service/compat/": "files of the SkyRL server's own folders",
    "piexp/config/paths.py": "conf/config.yaml, piexp's config tree",
    "piexp/transcripts/viewer.py": "the viewer's page template, a package file",
    "piexp/commands/summarize.py": "its plots, named from its one OUTPUT_STEM",
}


def test_every_run_folder_file_name_is_one_of_run_files() -> None:
    """Outside the modules that name other files (`OTHER_FILES`), a string that is a file
    name is a run folder's, and must be one of `RunFolder`: a new file written into a run
    folder under a name of its own fails here."""
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if path.name == "run_folder.py" or any(relative.startswith(other) for other in OTHER_FILES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and FILE_NAME.match(node.value):
                spelled.append(f"{relative}:{node.lineno}: {node.value!r}")
    assert not spelled, "name these through piexp.run_folder.RunFolder:\n" + "\n".join(spelled)


def test_a_manifest_of_a_newer_format_is_refused_and_an_old_one_reads(tmp_path) -> None:
    """`RunFolder.manifest` (reproduce, rescore and the base-model guard read a run's manifest
    through it): a folder written by a newer piexp, whose files may mean something else
    now, is one paragraph naming both formats; one written before `manifest_version` was
    recorded reads as format 1; a missing manifest is None unless something needs it."""
    import json

    import pytest

    from piexp.errors import UserError
    from piexp.run_folder import FORMAT_VERSION

    assert RunFolder(tmp_path).manifest() is None
    with pytest.raises(UserError, match="has no manifest.json .* so its tasks cannot be verified"):
        RunFolder(tmp_path).manifest(needed_for="its tasks cannot be verified")
    (tmp_path / RunFolder.MANIFEST).write_text(json.dumps({"seed": 0}))
    assert RunFolder(tmp_path).manifest() == {"seed": 0}
    newer = {"manifest_version": FORMAT_VERSION + 1, "packages": {"piexp": "9.9"}}
    (tmp_path / RunFolder.MANIFEST).write_text(json.dumps(newer))
    with pytest.raises(UserError, match=rf"newer piexp \(run-folder format {FORMAT_VERSION + 1}; .* piexp 9.9"):
        RunFolder(tmp_path).manifest()


def test_run_folders_recorded_by_an_older_piexp_read_through_run_folder(tmp_path) -> None:
    """The recorded run folders under tests/golden (written by an older piexp, the check's
    before the run-folder format was versioned in its manifest) read through `RunFolder`:
    their config, overrides and manifest, and `jobs_under` finds them; a folder moved aside
    by --replace is not a job, and a folder without a record is refused by name."""
    import shutil

    import pytest

    from piexp.errors import UserError

    golden = Path(__file__).resolve().parent / "golden"
    for name in ("check", "learner_local", "learner_local_train"):
        run = RunFolder(golden / name)
        assert run.is_run()
        assert run.config()["seed"] is not None and run.mode_name() in {"check", "eval", "train"}
        assert isinstance(run.overrides(), list)
        assert run.manifest(needed_for="its tasks cannot be verified")["task_digests"]
    assert RunFolder(golden / "check").overrides()[0] == "mode=check"

    shutil.copytree(golden / "check", tmp_path / "sweep" / "10")
    shutil.copytree(golden / "check", tmp_path / "sweep" / "2")
    shutil.copytree(golden / "check", tmp_path / "sweep" / f"3{RunFolder.REPLACED_MARK}20261205-000000")
    assert RunFolder.jobs_under(tmp_path / "sweep") == [tmp_path / "sweep" / "2", tmp_path / "sweep" / "10"]
    with pytest.raises(UserError, match="is not a piexp run folder"):
        RunFolder(tmp_path).config()
    assert RunFolder(tmp_path).mode_name() == "?" and RunFolder(tmp_path).completion() is None
