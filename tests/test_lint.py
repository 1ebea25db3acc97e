"""The code's own checks, run with the tests so CI fails on them: the import layers
written in pyproject.toml (`lint-imports`), that every module of piexp is in one of them
and no import circle joins piexp's modules, the lint rules (`ruff check`), the formatter
(`ruff format --check`) and the type checker (`mypy`, over every package of piexp and over
the benches), each over the whole configured tree."""

from __future__ import annotations

import graphlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    executable = BIN / tool
    if not executable.exists():
        pytest.fail(f"{tool} is not installed in {BIN}: pip install -e '.[test]'")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([str(executable), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_import_layers_are_kept() -> None:
    done = _run("lint-imports", "--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_every_top_level_module_is_in_a_layer() -> None:
    """The layers contract checks only the modules it names: one left out of every layer
    may import anything, from any layer, and nothing says so."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contract["contracts"] if c["type"] == "layers"]
    layered = {name.strip() for layer in layers for name in layer.split("|")}
    package = ROOT / "piexp"
    modules = {
        f"piexp.{path.stem if path.is_file() else path.name}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").is_file()
    }
    assert not modules - layered, (
        f"add to a layer of [tool.importlinter] in pyproject.toml: {sorted(modules - layered)}"
    )


def test_every_top_level_module_is_type_checked() -> None:
    """mypy checks only the packages pyproject.toml lists: a package left out of the list
    is never type-checked, and nothing says so."""
    checked = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["packages"])
    package = ROOT / "piexp"
    modules = {
        f"piexp.{path.stem if path.is_file() else path.name}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py") or (path / "__init__.py").is_file()
    }
    assert not modules - checked, f"add to [tool.mypy] packages in pyproject.toml: {sorted(modules - checked)}"


def test_no_import_circle() -> None:
    """No module of piexp imports, directly or through others, a module that imports it
    back. The layers contract cannot see a circle inside one layer (two files of
    piexp/config, a package and its submodule), and an import put inside a function to
    dodge the circle at import time still counts: the two modules still need each other."""
    graph = grimp.build_graph("piexp", cache_dir=None)
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as error:
        circle = list(reversed(error.args[1]))
    else:
        return
    pytest.fail(f"import circle (each module imports the next): {' -> '.join(circle)}")


def test_ruff_is_clean() -> None:
    done = _run("ruff", "check", "--no-cache", "piexp", "tests", "bench", "scripts")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_is_applied() -> None:
    done = _run("ruff", "format", "--check", "--no-cache", "piexp", "tests", "bench", "scripts")
    assert done.returncode == 0, "run `ruff format piexp tests bench scripts`:\n" + done.stdout[-4000:]


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for this file's two runs, new for each run of the suite: the benches' run reuses
    what the packages' run found of piexp and its dependencies (mypy rechecks a module
    whose source or dependencies changed, so a stale entry cannot hide an error)."""
    return tmp_path_factory.mktemp("mypy")


def test_mypy_is_clean(mypy_cache: Path) -> None:
    done = _run("mypy", "--cache-dir", str(mypy_cache))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_is_clean_on_the_benches(mypy_cache: Path) -> None:
    """The benches (`bench/`, scripts importing each other by file name, not a package)
    under the same mypy settings: a bench that no longer matches piexp's API fails here,
    not when someone next runs it. A second run, as mypy takes files or packages, not both."""
    done = _run("mypy", "--cache-dir", str(mypy_cache), "bench")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_file_of_piexp_is_over_500_lines() -> None:
    """A file a newcomer opens reads in one sitting: past 500 lines it is split by job.
    Every text source counts (Python, the zygote's C, the harness's scripts, YAML); npm's
    lockfile is written by npm, not read."""
    package = Path(__file__).resolve().parents[1] / "piexp"
    suffixes = {".py", ".c", ".h", ".js", ".mjs", ".ts", ".sh", ".yaml", ".json", ".txt", ".md"}
    long = {
        str(path.relative_to(package.parent)): lines
        for path in package.rglob("*")
        if path.suffix in suffixes
        and "__pycache__" not in path.parts
        and path.name != "package-lock.json"
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert not long, long
