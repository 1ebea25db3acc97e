"""The wheel must carry conf/ and experiments/ (as piexp._conf, piexp._experiments) and
every piexp subpackage: pyproject lists packages explicitly because setuptools' `find`
never discovers the mapped config packages (see pyproject.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_piexp_package_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {
        ".".join(path.parent.relative_to(REPO).parts)
        for path in (REPO / "piexp").rglob("__init__.py")
        if "__pycache__" not in path.parts
    }
    missing = sorted(found - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert {"piexp._conf", "piexp._experiments"} <= listed
    assert setuptools["package-dir"] == {"piexp._conf": "conf", "piexp._experiments": "experiments"}


def test_the_wheel_carries_every_data_file(tmp_path) -> None:
    """A real wheel, built offline from this tree: every config and preset YAML, every
    reference solution, the zygote's C source and the SkyRL pins are inside it."""
    import shutil
    import subprocess
    import sys
    import zipfile

    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds.
    source = tmp_path / "src"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "outputs", "multirun", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("piexp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"piexp/_conf/{p.relative_to(REPO / 'conf').as_posix()}" for p in (REPO / "conf").rglob("*.yaml")}
    expected |= {f"piexp/_experiments/{p.name}" for p in (REPO / "experiments").glob("*.yaml")}
    expected |= {p.relative_to(REPO).as_posix() for p in (REPO / "piexp/tasks/families/refs").iterdir()}
    expected |= {
        "piexp/sandbox/launchers/zygote.c",
        "piexp/sandbox/launchers/zygote_root.c",
        "piexp/sandbox/launchers/zygote.h",
        "piexp/harness/pi/forward.cjs",
        "piexp/harness/pi/shell.cjs",
        "piexp/harness/pi/shell.c",
        "piexp/harness/pi/npm/package.json",
        "piexp/harness/pi/npm/package-lock.json",
        "piexp/service/skyrl-constraints.txt",
        "piexp/service/compat/skyrl_server/launching.py",
        "piexp/service/compat/skyrl_server/fixes.py",
        "piexp/service/compat/skyrl_server/speedups.py",
    }
    assert len(expected) > 50
    assert not expected - names, sorted(expected - names)
