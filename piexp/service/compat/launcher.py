"""Writes the code the SkyRL server venv runs: the package ``skyrl_server/`` next to this
module (real Python files, linted and type-checked like the rest of piexp), read as text,
given the pinned skyrl version and written where the server venv's interpreter can run
it, as ``piexp_skyrl_server/`` beside a ``launcher.py`` entry point, in a folder named by
their content hash; and :func:`run_server_script`, which runs a script of one's own in
that venv with the package loaded (the checks and benches of its patches, and the pin
check of :mod:`piexp.service.compat.pins`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from piexp.service.compat.versions import SKYRL_VERSION

# The server-side package; never imported by piexp (it runs in the server venv, without piexp).
SERVER_PACKAGE = Path(__file__).with_name("skyrl_server")
# The package's name where it is written out (not `skyrl`, which it would shadow).
WRITTEN_PACKAGE = "piexp_skyrl_server"
# Where the server-side code says which skyrl version it was made for.
VERSION_PLACEHOLDER = "__SKYRL_VERSION__"

ENTRY_POINT = f'''"""piexp's launcher for skyrl {SKYRL_VERSION}'s Tinker API server and engine, run by the
server venv's own interpreter as ``python launcher.py api|engine [skyrl args]``; the code is
{WRITTEN_PACKAGE}/ beside it (piexp/service/compat/skyrl_server/ in piexp, written out by
piexp/service/compat/launcher.py: do not edit this copy, it is rewritten when it differs)."""

import os

import {WRITTEN_PACKAGE}
from {WRITTEN_PACKAGE} import launching

if __name__ == "__main__":
    launching.main(os.path.abspath(__file__), {WRITTEN_PACKAGE}.engine_patches)
'''


def launcher_files() -> dict[str, str]:
    """The files the server venv runs, by path relative to the launcher's folder:
    ``launcher.py`` and ``skyrl_server/`` as ``piexp_skyrl_server/``, the pinned skyrl
    version filled in."""
    files = {"launcher.py": ENTRY_POINT}
    for path in sorted(SERVER_PACKAGE.glob("*.py")):
        text = path.read_text(encoding="utf-8").replace(VERSION_PLACEHOLDER, SKYRL_VERSION)
        files[f"{WRITTEN_PACKAGE}/{path.name}"] = text
    return files


def _complete(folder: Path, files: Mapping[str, str]) -> bool:
    try:
        return all((folder / name).read_text(encoding="utf-8") == text for name, text in files.items())
    except OSError:
        return False


def write_launcher(directory: Path) -> Path:
    """Write :func:`launcher_files` into a folder of ``directory`` named by their hash
    (only when it is not complete already) and return the entry point's path."""
    files = launcher_files()
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:12]
    folder = directory / f"piexp_skyrl_launcher_{digest}"
    if not _complete(folder, files):
        directory.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".piexp_skyrl_launcher-", dir=directory))
        for name, text in files.items():
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            (scratch / name).write_text(text, encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)  # an incomplete one (a crash while writing it)
        try:
            scratch.rename(folder)
        except OSError:  # another writer finished first
            shutil.rmtree(scratch, ignore_errors=True)
        if not _complete(folder, files):
            raise OSError(f"could not write piexp's SkyRL launcher to {folder}")
    return folder / "launcher.py"


def launcher_preamble(*patches: str) -> str:
    """Python lines, for a script the server venv's interpreter runs with the launcher's
    path as ``sys.argv[1]``, that load the server-side package as ``launcher``, stand in
    for torch, and apply the named engine patches (names of
    ``skyrl_server.ENGINE_PATCHES``, e.g. ``needed_logprobs``) in that list's order."""
    lines = [
        "import os, sys",
        "sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))",
        f"import {WRITTEN_PACKAGE} as launcher",
        'launcher.launching.import_without_torch("engine")',
        f"launcher.apply(*{list(patches)!r})",
    ]
    return "\n".join(lines) + "\n"


class ServerScriptError(RuntimeError):
    """A script run in the server venv failed or printed no tagged line."""


#: The environment a script in the server venv gets, besides what the caller adds: JAX
#: on CPU, no Hugging Face downloads.
SCRIPT_ENV = {"JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run_server_script(
    script: str,
    args: Iterable[str] = (),
    *,
    tag: str = "RESULT",
    patches: Iterable[str] = (),
    python: Path | None = None,
    launcher: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
) -> Any:
    """Run ``script`` in the server venv's interpreter (``python``; default: the venv's,
    created if missing) after :func:`launcher_preamble` with ``patches``, as ``python -c
    PREAMBLE+SCRIPT LAUNCHER *args`` (``launcher``: default, one written to a temporary
    folder), and return the JSON the script prints on its line starting ``TAG ``.

    The environment is :data:`SCRIPT_ENV`, ``PATH`` and ``env``. Raises
    :class:`ServerScriptError` (with the end of its stderr) when the script exits non-zero
    or prints no such line."""
    if python is None:
        from piexp.service.local_venv import ensure_server_venv, venv_python

        python = venv_python(ensure_server_venv())
    with tempfile.TemporaryDirectory(prefix="piexp-server-script-") as scratch:
        entry = launcher if launcher is not None else write_launcher(Path(scratch))
        command = [str(python), "-c", launcher_preamble(*patches) + script, str(entry), *map(str, args)]
        environment = {**SCRIPT_ENV, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
        try:
            result = subprocess.run(
                command, capture_output=True, text=True, env=environment, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as error:
            raise ServerScriptError(f"the server venv's script ran past {timeout_s:g} s") from error
    if result.returncode != 0:
        raise ServerScriptError(f"the server venv's script exited {result.returncode}:\n{result.stderr[-4000:]}")
    prefix = f"{tag} "
    line = next((line for line in result.stdout.splitlines() if line.startswith(prefix)), None)
    if line is None:
        raise ServerScriptError(f"the server venv's script printed no {tag} line:\n{result.stderr[-4000:]}")
    return json.loads(line.removeprefix(prefix))
