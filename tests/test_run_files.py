"""A run folder's file names have one home, `piexp/run_files.py`: no other module of piexp
spells one as a string (a module that owns a file's contents binds its constant to the
name there), so a new run-folder file is one line there, and a renamed one cannot leave a
reader behind."""

from __future__ import annotations

import ast
from pathlib import Path

from piexp.run_files import RunFiles

PACKAGE = Path(__file__).resolve().parents[1] / "piexp"
NAMES = {value for key, value in vars(RunFiles).items() if key.isupper() and isinstance(value, str)}
# A name that is also an ordinary word of other files (Hydra's own config.yaml of conf/, a
# task's workspace files) is told apart by its folder: these are checked as paths only.
AMBIGUOUS = {".hydra/config.yaml", ".hydra/overrides.yaml", ".hydra", "eval_base", "eval_trained"}


def test_no_module_but_run_files_spells_a_run_folder_file_name() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "run_files.py":
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
    assert not spelled, "name these through piexp.run_files.RunFiles:\n" + "\n".join(spelled)
