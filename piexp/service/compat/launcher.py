"""Writes the launcher the SkyRL server venv runs (items 1-3, 6-9, 11 and 12 of this package's
docstring): the code is ``skyrl_launcher.py`` next to this module, a real Python file
(linted like the rest of piexp) that is read as text, given the pinned skyrl version and
written where the server venv's interpreter can run it, under a name carrying its
content hash; and the lines that load it into a script of one's own run by that venv
(the checks and benches of its patches)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from piexp.service.compat.versions import SKYRL_VERSION

# The launcher's code; never imported by piexp (it runs in the server venv, without piexp).
LAUNCHER_CODE = Path(__file__).with_name("skyrl_launcher.py")
# Where the launcher's code says which skyrl version it was made for.
VERSION_PLACEHOLDER = "__SKYRL_VERSION__"


def launcher_source() -> str:
    """The launcher as the server venv runs it: ``skyrl_launcher.py`` with the pinned
    skyrl version filled in."""
    return LAUNCHER_CODE.read_text(encoding="utf-8").replace(VERSION_PLACEHOLDER, SKYRL_VERSION)


def write_launcher(directory: Path) -> Path:
    """Write :func:`launcher_source` into ``directory`` (only when it differs) and
    return its path; the file name carries a content hash."""
    source = launcher_source()
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    path = directory / f"piexp_skyrl_launcher_{digest}.py"
    if not path.is_file() or path.read_text(encoding="utf-8") != source:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(source, encoding="utf-8")
        tmp.replace(path)
    return path


def launcher_preamble(*patches: str) -> str:
    """Python lines, for a script the server venv's interpreter runs with the launcher's
    path as ``sys.argv[1]``, that load the launcher as ``launcher``, stand in for torch,
    and apply the named patch functions (e.g. ``_cpu_training_speedups``) in order."""
    lines = [
        "import importlib.util, sys",
        "spec = importlib.util.spec_from_file_location('launcher', sys.argv[1])",
        "launcher = importlib.util.module_from_spec(spec)",
        "spec.loader.exec_module(launcher)",
        "launcher._import_without_torch()",
        *(f"launcher.{name}()" for name in patches),
    ]
    return "\n".join(lines) + "\n"
