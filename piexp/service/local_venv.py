"""The SkyRL server's own virtual environment, created once under piexp's cache.

Why a separate venv: skyrl 0.4.0 needs Python >= 3.12, tinker 0.25.x and transformers
5.6-5.16, while piexp's environment (tinker-cookbook 0.5.8) needs tinker 0.38 and
transformers <= 5.5; the server therefore runs as a separate process with its own
interpreter.

What gets installed: ``skyrl==0.4.0`` without its declared dependencies, then the
dependencies of its ``tinker`` and ``jax`` extras (plus ``aiohttp`` and ``psutil``,
which it imports without declaring), all held to the exact versions in
``skyrl-constraints.txt``. ``peft`` (and through it a CUDA torch, about 6.7 GB on
Python 3.12) is left out: the JAX path only needs two names from them, supplied by
``piexp/service/compat/skyrl_server/launching.py``. Download about 400 MB, about 1.4 GB on
disk, about 110 s here (2 cores).

Idempotent: a stamp file keyed to the recipe (constraints, requirements, Python) is
written last; a venv without a matching stamp is rebuilt from scratch.
``python -m piexp.service.local_venv [--force]`` creates it ahead of time (the set-up
script does, so the slow test does not pay for it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from piexp.errors import UserError
from piexp.files import exclusive_lock
from piexp.service.compat.versions import SKYRL_VERSION

__all__ = [
    "PYTHON_CANDIDATES",
    "ServerVenvError",
    "ensure_server_venv",
    "find_python312",
    "server_venv_dir",
    "venv_python",
]

#: Where a Python >= 3.12 is looked for, in order (``$PIEXP_SERVER_PYTHON`` first).
PYTHON_CANDIDATES = ("python3.12", "python3.13", "/root/.pyenv/versions/3.12.1/bin/python3.12")

#: skyrl's declared base dependencies and those of its ``tinker`` and ``jax`` extras
#: (skyrl 0.4.0 METADATA), minus ``peft``; plus the undeclared ``aiohttp`` / ``psutil``.
REQUIREMENTS = (
    "datasets>=4.0.0", "pillow>=11.3.0", "rich>=14.1.0", "safetensors>=0.6.2", "tokenizers>=0.23.1",
    "transformers>=5.6.1,<=5.16.1", "typer>=0.17.4", "hf_transfer", "cloudpathlib>=0.23.0",
    "zstandard>=0.23.0", "xxhash>=3.0.0",
    "tinker>=0.25.0,<0.26.0", "fastapi[standard]", "sqlmodel", "sqlalchemy[asyncio]", "aiosqlite",
    "asyncpg", "psycopg2-binary",
    "jax>=0.8,<1.0", "flax>=0.12.10", "optax>=0.2.5",
    "aiohttp", "psutil",
)  # fmt: skip

STAMP = ".piexp-server-venv.json"


class ServerVenvError(UserError):
    """The server venv could not be created (no Python 3.12, no package index...)."""

    exit_code = 3


def _constraints_text() -> str:
    return resources.files("piexp.service").joinpath("skyrl-constraints.txt").read_text(encoding="utf-8")


def server_venv_dir() -> Path:
    from piexp.tokenizer import piexp_cache_dir

    return piexp_cache_dir() / f"skyrl-{SKYRL_VERSION}-venv"


def venv_python(venv: Path | None = None) -> Path:
    return (venv or server_venv_dir()) / "bin" / "python"


def find_python312() -> str | None:
    """A Python >= 3.12 interpreter (skyrl's floor), or None."""
    candidates = [os.environ.get("PIEXP_SERVER_PYTHON", "").strip(), *PYTHON_CANDIDATES]
    for candidate in filter(None, candidates):
        path = shutil.which(candidate) or (candidate if Path(candidate).is_file() else None)
        if not path:
            continue
        try:
            out = subprocess.run(
                [path, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                capture_output=True, text=True, timeout=20, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.stdout.strip() == "True":
            return path
    return None


def _recipe(python: str) -> dict[str, str]:
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    digest = hashlib.sha256(("\n".join(REQUIREMENTS) + _constraints_text()).encode()).hexdigest()[:16]
    return {"skyrl": SKYRL_VERSION, "python": version, "requirements": digest}


def _stamp_matches(venv: Path) -> bool:
    try:
        stamp = json.loads((venv / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not venv_python(venv).is_file():
        return False
    return (
        stamp.get("skyrl") == SKYRL_VERSION
        and stamp.get("requirements") == _recipe(str(venv_python(venv)))["requirements"]
    )


def _run_step(progress, task, description: str, command: list[str], log) -> None:
    progress.update(task, description=description)
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        raise ServerVenvError(
            f"Creating the SkyRL server environment failed at: {description} (exit {code}). "
            f"The full pip output is in {log.name}. It needs the Python package index (PyPI) "
            "once; afterwards runs are offline."
        )
    progress.advance(task)


def ensure_server_venv(*, force: bool = False, quiet: bool = False) -> Path:
    """Create the server venv unless a complete one exists; return its directory.

    Shows a progress display (rich) on stderr with the step being run and the time
    spent; pip's own output goes to ``<venv>.log``.
    """
    venv = server_venv_dir()
    if not force and _stamp_matches(venv):
        return venv
    # Two runs on a fresh machine (a parallel sweep, test workers) would both delete and
    # fill the same folder: one creates it while the others wait, then find it complete.
    with exclusive_lock(venv.parent / f".{venv.name}.lock"):
        if not force and _stamp_matches(venv):
            return venv
        return _create_server_venv(venv, quiet=quiet)


def _create_server_venv(venv: Path, *, quiet: bool) -> Path:
    python = find_python312()
    if python is None:
        raise ServerVenvError(
            "service=local needs a Python >= 3.12 for the SkyRL server (skyrl's floor); none was "
            f"found ({', '.join(PYTHON_CANDIDATES)}). Install one (e.g. `pyenv install 3.12`) or "
            "point $PIEXP_SERVER_PYTHON at it."
        )
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    constraints = venv.parent / f"{venv.name}-constraints.txt"
    constraints.write_text(_constraints_text(), encoding="utf-8")
    pip = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    steps = [
        (f"virtual environment ({Path(python).name})", [python, "-m", "venv", str(venv)]),
        (f"skyrl {SKYRL_VERSION} (without its torch-pulling peft)", [*pip, "--no-deps", f"skyrl=={SKYRL_VERSION}"]),
        ("JAX, the tinker API server and their dependencies (~400 MB)", [*pip, "-c", str(constraints), *REQUIREMENTS]),
    ]
    started = time.monotonic()
    console = Console(stderr=True, quiet=quiet)
    with (
        open(venv.parent / f"{venv.name}.log", "w", encoding="utf-8") as log,
        Progress(
            SpinnerColumn(), TextColumn("[bold]SkyRL server venv[/]: {task.description}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False,
        ) as progress,
    ):  # fmt: skip
        task = progress.add_task("starting", total=len(steps))
        for description, command in steps:
            _run_step(progress, task, description, command, log)
        progress.update(task, description=f"done in {time.monotonic() - started:.0f} s")
    stamp = {**_recipe(str(venv_python(venv))), "created_s": round(time.monotonic() - started, 1)}
    (venv / STAMP).write_text(json.dumps(stamp, indent=2), encoding="utf-8")
    return venv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Create piexp's SkyRL server venv (idempotent).")
    parser.add_argument("--force", action="store_true", help="rebuild even if a complete venv exists")
    args = parser.parse_args(argv)
    from piexp.errors import exit_on_user_error

    def run() -> None:
        venv = ensure_server_venv(force=args.force)
        print(venv)

    return exit_on_user_error(run)


if __name__ == "__main__":
    sys.exit(main())
