"""The sandbox's view of the host: the read-only root layout every launcher builds (the
system directories, a few /etc entries, and each runtime's install prefix when it lives
outside /usr), the runtimes resolved on the host, and the environment of a run and of a
launcher, in which nothing of the host's environment appears."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable, Optional

SANDBOX_UID = 65534
SANDBOX_GID = 65534
SANDBOX_WORKDIR = "/sandbox"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# A run's whole environment: nothing of the host's.
SANDBOX_ENV = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}

# /etc entries a dynamically linked runtime needs; nothing else of /etc is exposed. Files
# are copied into the sandbox's (read-only) root with --file, a symlink is recreated, and
# only the alternatives directory is bind-mounted: every bind costs bwrap a mount, a
# remount and a read of /proc/self/mountinfo (~0.12 ms each; six binds were ~0.7 ms a
# run). ld.so.conf(.d) are left out: only ldconfig reads them, the loader reads the cache.
_ETC_COPIED_FILES = ("/etc/ld.so.cache", "/etc/nsswitch.conf", "/etc/localtime")
_ETC_BOUND_DIRS = ("/etc/alternatives",)


@functools.lru_cache(maxsize=1)
def _etc_copies_split() -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(symlinks as (target, path), regular files) among _ETC_COPIED_FILES that exist:
    a symlink (/etc/localtime usually is one) is recreated, a file is copied."""
    links, files = [], []
    for path in _ETC_COPIED_FILES:
        if os.path.islink(path):
            links.append((os.readlink(path), path))
        elif os.path.isfile(path):
            files.append(path)
    return tuple(links), tuple(files)


@dataclass(frozen=True)
class Runtime:
    """A runtime resolved on the host: the absolute binary to exec and the directory to
    bind read-only into the sandbox (None when it already lives under /usr)."""

    binary: str
    bind_prefix: Optional[str]
    # Where the prefix is bound from: itself, or a read-only view of it that the run
    # user can reach (run_area.RunArea.view_of); None means bind_prefix.
    bind_source: Optional[str] = None


def _under_usr(path: str) -> bool:
    return path == "/usr" or path.startswith("/usr/")


def resolve_runtime(binary: str) -> Optional[Runtime]:
    """Find `binary` on PATH and resolve it to a real executable and its install prefix.

    For python the interpreter is asked for its base prefix, which sees through pyenv
    shims and virtual environments: the sandbox gets the bare base interpreter, never
    the venv (and its site-packages) piexp itself runs in.
    """
    found = shutil.which(binary)
    if found is None:
        return None
    if binary.startswith("python"):
        try:
            out = subprocess.run(
                [
                    found,
                    "-I",
                    "-S",
                    "-c",
                    "import sys,os;print(sys.base_prefix);print(os.path.realpath(sys.executable))",
                ],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout.splitlines()
            base_prefix, executable = out[0], out[1]
        except (subprocess.SubprocessError, OSError, IndexError):
            return None
        exe = executable
        if not exe.startswith(base_prefix.rstrip("/") + "/"):
            # A venv interpreter: use the base installation's python3 instead.
            for name in ("python3", os.path.basename(executable)):
                cand = os.path.join(base_prefix, "bin", name)
                if os.access(cand, os.X_OK):
                    exe = os.path.realpath(cand)
                    break
        prefix = os.path.realpath(base_prefix)
    else:
        exe = os.path.realpath(found)
        prefix = os.path.dirname(os.path.dirname(exe))
    return Runtime(binary=exe, bind_prefix=None if _under_usr(prefix) or _under_usr(exe) else prefix)


def root_layout(runtimes: Iterable[Runtime]) -> tuple[tuple[str, str, str], ...]:
    """The sandbox's read-only root as (kind, a, b) rows, for both launchers: "B" binds
    host path a read-only at b, "S" makes b a symlink to a, "F" puts a read-only copy of
    host file a at b. The system dirs, the /etc entries above, and each runtime's
    install prefix when it lives outside /usr."""
    rows: list[tuple[str, str, str]] = [("B", "/usr", "/usr")]
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        target = os.path.join("/", name)
        if os.path.islink(target):
            rows.append(("S", os.readlink(target), target))
        elif os.path.isdir(target):
            rows.append(("B", target, target))
    rows += [("B", entry, entry) for entry in _ETC_BOUND_DIRS if os.path.isdir(entry)]
    links, files = _etc_copies_split()
    rows += [("S", target, path) for target, path in links]
    rows += [("F", path, path) for path in files]
    prefixes: dict[str, str] = {}
    for runtime in runtimes:
        if runtime.bind_prefix and runtime.bind_prefix not in prefixes:
            prefixes[runtime.bind_prefix] = runtime.bind_source or runtime.bind_prefix
    rows += [("B", source, prefix) for prefix, source in prefixes.items()]
    return tuple(rows)


def open_etc_copies() -> list[tuple[int, str]]:
    """(fd, path) of each /etc file a run gets a copy of (see _ETC_COPIED_FILES), opened
    for one bwrap start: bwrap reads each fd to its end. The caller closes them."""
    opened = []
    for path in _etc_copies_split()[1]:  # the symlinks among them: root_layout
        try:
            opened.append((os.open(path, os.O_RDONLY | os.O_CLOEXEC), path))
        except OSError:
            continue
    return opened


def launcher_env() -> dict[str, str]:
    """The environment a launcher (bwrap, the zygote) is started with: nothing from the
    host. What a run's /proc/1/environ would show (the zygote's is not even readable)."""
    return {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}
