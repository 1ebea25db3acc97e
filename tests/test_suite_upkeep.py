"""The suite stays fast and readable as it grows: `make test` writes its
slowest tests into a file it names, and a slow test says why it is slow."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_make_test_writes_the_slowest_tests_into_a_file_it_names() -> None:
    makefile = (ROOT / "Makefile").read_text()
    named = re.search(r"^TEST_DURATIONS := (\S+)$", makefile, re.M)
    assert named, "the Makefile names the file"
    recipe = makefile.split("\ntest: setup\n", 1)[1].split("\n\n", 1)[0]
    assert (
        "pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 --durations-file=$(TEST_DURATIONS)"
        in recipe
    )
    assert named[1] in (ROOT / ".gitignore").read_text().split()
    assert "make test" in (ROOT / "README.md").read_text()


def test_the_durations_file_lists_the_slowest_test_phases(tmp_path: Path) -> None:
    target = tmp_path / "durations.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_languages.py",
         "--durations=3", f"--durations-file={target}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    lines = target.read_text().splitlines()
    assert lines[0].startswith("slowest 3 durations (of ") and lines[0].endswith("exit status 0)")
    seconds = [float(line.split()[0].rstrip("s")) for line in lines[1:]]
    assert len(seconds) == 3 and seconds == sorted(seconds, reverse=True)
    assert all(" tests/test_languages.py::test_" in line for line in lines[1:])
    assert f"the slowest tests: {target}" in result.stdout


def _slow_tests_without_a_docstring(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_slow = any(
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        and "mark.slow" in ast.unparse(node.value)
        for node in tree.body
    )
    missing = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            slow = module_slow or any("mark.slow" in ast.unparse(d) for d in node.decorator_list)
            if slow and not ast.get_docstring(node):
                missing.append(f"{path.relative_to(ROOT)}::{node.name}")
    return missing


def test_every_slow_test_says_why_in_its_docstring() -> None:
    """Tests marked `slow` take minutes; each says what it spends them on, so the list of
    slowest tests can be read against a reason."""
    missing = [
        name for path in sorted((ROOT / "tests").rglob("test_*.py")) for name in _slow_tests_without_a_docstring(path)
    ]
    assert missing == []
