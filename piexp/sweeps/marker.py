"""The completed marker of a job: `<job folder>/.piexp/complete.json`.

A job is only skipped on a rerun if the marker's hash equals the hash of the config the
job would run now, so a sweep whose values changed (job 1 of the new sweep is a different
job than job 1 of the old one) reruns instead of silently reporting stale results. The
hash covers the validated `RunConfig` only, not Hydra's own settings (run folder, time
stamps, launcher), which differ between two launches of the same job.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path


from piexp.config.schema import RunConfig
from piexp.files import atomic_write_text

MARKER_PATH = Path(RunFolder.COMPLETE_MARKER)


def config_hash(config: RunConfig) -> str:
    """sha256 of the resolved config as canonical JSON (sorted keys)."""
    text = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def clear_marker(run_dir: Path) -> None:
    (Path(run_dir) / MARKER_PATH).unlink(missing_ok=True)


def write_marker(run_dir: Path, digest: str, *, metric: float | None, overrides: list[str]) -> Path:
    """Write the marker atomically (`atomic_write_text`): it is written last, after the
    job's results, so its presence means the job really finished."""
    target = Path(run_dir) / MARKER_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "config_hash": digest,
        "completed_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "metric": metric,
        "overrides": list(overrides),
    }
    atomic_write_text(target, json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return target
