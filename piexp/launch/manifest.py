"""The run manifest: what is needed to tell later what exactly a run was.

A run's numbers are only comparable with another's if we know the code (git commit
and whether the tree had uncommitted changes), the library versions, the seed, and
exactly which tasks were trained and evaluated on (their digests, plus the
train/eval overlap report).  ``manifest.json`` records that in every run folder.

It is written atomically (`piexp.files.atomic_write_text`) so a crash never leaves a truncated
manifest that looks valid, with sorted keys so manifests diff cleanly, and through
:func:`piexp.redaction.redact_secrets` so no API key ends up in a run folder.
"""

from __future__ import annotations

from piexp.run_folder import FORMAT_VERSION, RunFolder

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from piexp.files import atomic_write_text
from piexp.redaction import redact_secrets

__all__ = ["MANIFEST_NAME", "TRACKED_PACKAGES", "build_manifest", "git_state", "package_versions", "write_manifest"]

MANIFEST_NAME = RunFolder.MANIFEST
MANIFEST_VERSION = FORMAT_VERSION

#: Distributions whose versions change results.  Read with importlib.metadata so
#: nothing is imported (importing torch alone takes seconds and may touch a GPU).
TRACKED_PACKAGES: tuple[str, ...] = (
    "piexp",
    "tinker",
    "tinker-cookbook",
    "tml-renderers",
    "transformers",
    "tokenizers",
    "hydra-core",
    "torch",
)

_GIT_TIMEOUT_S = 5.0


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution, ``None`` when it is not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            # Never prompt (e.g. for credentials) from a non-interactive run.
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"},
            check=False,
        )
    except (OSError, subprocess.SubprocessError):  # git missing, time-out
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_state(package_dir: Path | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the git checkout that holds the piexp package.

    ``{"commit": None, "dirty": None}`` when piexp is not running from a checkout
    (e.g. installed as a wheel), when git is missing, or when git does not answer
    within a few seconds.  The checkout must really contain this package: a wheel
    installed into a venv that happens to sit inside some repository must not report
    that repository's commit.  ``dirty`` counts untracked (non-ignored) files too,
    since a new, uncommitted module changes what runs.
    """
    pkg = (package_dir or Path(__file__).resolve().parents[1]).resolve()
    unknown: dict[str, Any] = {"commit": None, "dirty": None}
    top = _git(["rev-parse", "--show-toplevel"], pkg)
    if not top:
        return unknown
    try:
        pkg.relative_to(Path(top).resolve())
        if (Path(top) / "piexp").resolve() != pkg:
            return unknown
    except (ValueError, OSError):
        return unknown
    commit = _git(["rev-parse", "HEAD"], pkg)
    status = _git(["status", "--porcelain"], pkg)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def build_manifest(
    *,
    seed: int,
    task_digests: dict[str, list[str]],
    overlap_report: dict,
    extra: dict | None = None,
) -> dict[str, Any]:
    """Assemble the manifest of a run (not yet redacted; :func:`write_manifest` does that).

    ``extra`` entries (mode, families, languages...) are added at the top level; they
    may not replace the fields above, which would make manifests ambiguous.
    """
    git = git_state()
    manifest: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "task_digests": {k: list(v) for k, v in task_digests.items()},
        "task_counts": {k: len(v) for k, v in task_digests.items()},
        "overlap_report": overlap_report,
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "packages": package_versions(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    if extra:
        clash = sorted(set(extra) & set(manifest))
        if clash:
            raise ValueError(f"manifest extra keys would overwrite core fields: {clash}")
        manifest.update(extra)
    return manifest


def write_manifest(run_dir: Path, manifest: dict) -> Path:
    """Write ``run_dir/manifest.json`` atomically, keys sorted, secrets redacted.

    Returns the path written.  Odd values (paths, enums) are turned into strings
    *before* redaction, so a secret inside an object's ``str`` is caught too, and a
    run does not fail at its very start over an unserialisable field.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    plain = json.loads(json.dumps(manifest, default=str))
    text = json.dumps(redact_secrets(plain), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    target = run_dir / MANIFEST_NAME
    atomic_write_text(target, text)
    return target
