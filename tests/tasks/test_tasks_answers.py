"""Each family's generator and its reference programs agree on many tasks, and stay apart.

The generators compute their answers by methods of their own (a brute force or a
different algorithm), so agreement here is a real cross-check of two implementations:
the Python reference runs in-process and the JavaScript one in a single node process per
family (tests/tasks/run_js_references.js), on the default params (both splits) and on
params at the small end of the limits, where off-by-one mistakes live. Since the
references were not changed when the generators were rewritten, this is also what pins
the answers of existing seeds. test_tasks_references.py runs fewer tasks through the real
sandbox, Julia included.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from piexp.tasks import FAMILIES, Task, build_tasks, reference_solution
from piexp.tasks.family import REFS_DIR

SEED = 0
PER_SPLIT = 100  # default-params tasks per split and family (both splits run)
EDGE_PER_SPLIT = 25  # tasks per split for the small-end params below
# Params at the small end of each family's limits (1900, a century that is no leap year, for dates).
EDGE_PARAMS: dict[str, dict[str, int]] = {
    "arith": {"n_expressions": 10, "max_depth": 6, "max_literal": 3, "modulus": 2},
    "csv_agg": {"n_rows": 12, "n_products": 1, "n_regions": 2, "max_quantity": 3},
    "dates": {"n_bookings": 5, "first_year": 1900, "n_years": 3, "max_nights": 400},
    "graph_paths": {"n_nodes": 6, "n_edges": 3, "n_queries": 5, "max_weight": 3},
    "grid_search": {"rows": 2, "cols": 9, "wall_percent": 45, "n_targets": 3},
    "json_tree": {"n_nodes": 4, "max_children": 1, "max_size": 5},
    "log_stats": {"n_lines": 6, "n_services": 2, "max_latency_ms": 40},
    "number_theory": {"n_ranges": 3, "max_value": 40, "max_divisor": 2},
}
JS_DRIVER = Path(__file__).with_name("run_js_references.js")
GENERATOR_SOURCES = {family.name: Path(family.generate.__code__.co_filename) for family in FAMILIES.values()}
# Names through which a generator could reach or run a reference program's code.
REFERENCE_ACCESS = {"REFS_DIR", "reference", "reference_solution", "_read_reference", "exec", "eval"}
FORBIDDEN_MODULES = ("piexp.tasks.families.refs", "runpy", "importlib")


@cache
def _tasks(family: str) -> tuple[Task, ...]:
    tasks = []
    for split in ("train", "eval"):
        tasks += build_tasks(split, PER_SPLIT, SEED, [family])
        tasks += build_tasks(split, EDGE_PER_SPLIT, SEED, [family], {family: EDGE_PARAMS[family]})
    return tuple(tasks)


def _write_workspace(task: Task, workdir: Path) -> Path:
    workdir.mkdir()
    for name, content in task.files.items():
        (workdir / name).write_text(content, encoding="utf-8")
    return workdir


def _mismatches(tasks: tuple[Task, ...], printed: list[str]) -> list[str]:
    assert len(printed) == len(tasks)
    return [
        f"{task.task_id} {dict(task.params)}: reference printed {line[-500:]!r}, generator says {task.answer}"
        for task, line in zip(tasks, printed)
        if line != task.answer
    ]


def _run_python_reference(code, task: Task, workdir: Path) -> str:
    """The reference's last printed line, run in this process with the workspace as cwd."""
    home = os.getcwd()
    printed = io.StringIO()
    try:
        os.chdir(_write_workspace(task, workdir))
        with contextlib.redirect_stdout(printed):
            exec(code, {"__name__": "__main__"})
    except Exception as error:  # reported as that task's mismatch, not a test error
        return f"error: {error!r}"
    finally:
        os.chdir(home)
    lines = printed.getvalue().strip().splitlines()
    return lines[-1].strip() if lines else ""


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generator_agrees_with_python_reference(family: str, tmp_path: Path) -> None:
    tasks = _tasks(family)
    code = compile(reference_solution(family, "python"), f"refs/{family}.py", "exec")
    printed = [_run_python_reference(code, task, tmp_path / str(i)) for i, task in enumerate(tasks)]
    assert not _mismatches(tasks, printed), "\n".join(_mismatches(tasks, printed)[:10])


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not on PATH on this machine")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generator_agrees_with_javascript_reference(family: str, tmp_path: Path) -> None:
    tasks = _tasks(family)
    workspaces = [str(_write_workspace(task, tmp_path / str(i))) for i, task in enumerate(tasks)]
    done = subprocess.run(
        ["node", str(JS_DRIVER), str(REFS_DIR / f"{family}.js")],
        input=json.dumps(workspaces),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = json.loads(done.stdout)
    assert not _mismatches(tasks, printed), "\n".join(_mismatches(tasks, printed)[:10])


def _code_lines(source: str) -> set[str]:
    """Non-trivial lines of Python code, comments and all whitespace removed."""
    lines = {re.sub(r"\s+", "", line.split("#", 1)[0]) for line in source.splitlines()}
    return {line for line in lines if len(line) >= 25}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generator_does_not_reuse_reference_code(family: str) -> None:
    """A shared algorithm would make the agreement tests above unable to catch its bugs."""
    source = GENERATOR_SOURCES[family].read_text(encoding="utf-8")
    tree = ast.parse(source)
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.startswith(FORBIDDEN_MODULES)], imported
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    names |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert not names & REFERENCE_ACCESS, f"{family}'s generator reaches its references"
    shared = _code_lines(source) & _code_lines(reference_solution(family, "python"))
    assert not shared, f"{family}'s generator repeats its Python reference: {sorted(shared)}"
