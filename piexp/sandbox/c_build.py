"""A C program of piexp's, compiled once per source version on the machine it runs on
(the sandbox's zygote, Pi's shell): the binary's name in piexp's cache carries a hash of
its sources, so a change of source builds anew and two processes racing leave one
complete binary."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping

__all__ = ["CBuildError", "c_binary", "cache_dir"]


class CBuildError(Exception):
    """No C compiler, or the build failed: the message says which."""


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "piexp")


def c_binary(name: str, sources: Mapping[str, bytes]) -> str:
    """The path of `name` built from `sources` (file name -> text; the .c files are the
    units), compiling it first if this source version has none (a second or so)."""
    digest = hashlib.sha256(
        b"".join(file.encode() + b"\0" + text + b"\0" for file, text in sources.items())
    ).hexdigest()[:16]
    target = os.path.join(cache_dir(), f"{name}-{digest}")
    if os.access(target, os.X_OK):
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise CBuildError(f"no C compiler (cc or gcc) on PATH to build {name}")
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=f"{name}-build-") as tmp:
            out = os.path.join(tmp, name)
            for file, text in sources.items():
                with open(os.path.join(tmp, file), "wb") as f:
                    f.write(text)
            units = [os.path.join(tmp, file) for file in sources if file.endswith(".c")]
            done = subprocess.run([compiler, "-O2", "-o", out, *units], capture_output=True, text=True)
            if done.returncode != 0:
                raise CBuildError(
                    f"building {name} with {compiler} failed (exit {done.returncode}): "
                    f"{done.stderr.strip()[-2000:] or 'no message'}"
                )
            os.replace(out, target)  # atomic: a concurrent build leaves one complete binary
    except OSError as exc:
        raise CBuildError(f"could not build {name} in {cache_dir()}: {exc}") from exc
    return target
