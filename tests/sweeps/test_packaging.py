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
