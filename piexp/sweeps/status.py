"""Live sweep status: `sweep_status.json` and `sweep_status.md` in the sweep folder.

Jobs run in separate processes (joblib) or on separate machines sharing a file system
(submitit), so each update is a read-modify-write under an exclusive `flock` on a lock
file next to the status files, and the files are replaced atomically: a reader (`cat`,
`watch`, an editor) never sees half a table.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

STATUS_JSON = "sweep_status.json"
STATUS_MD = "sweep_status.md"
_LOCK = ".sweep_status.lock"


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _format_metric(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


class SweepStatus:
    """The status table of one sweep folder; `update` is safe across processes."""

    def __init__(self, sweep_dir: Path) -> None:
        self.sweep_dir = Path(sweep_dir)

    @property
    def json_path(self) -> Path:
        return self.sweep_dir / STATUS_JSON

    @property
    def md_path(self) -> Path:
        return self.sweep_dir / STATUS_MD

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        with open(self.sweep_dir / _LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"jobs": {}}
        return data if isinstance(data, dict) and isinstance(data.get("jobs"), dict) else {"jobs": {}}

    def update(self, job: int | str, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into the entry of `job` and rewrite both files."""
        with self._locked():
            data = self.read()
            entry = data["jobs"].setdefault(str(job), {"job": job})
            entry.update(fields)
            entry["updated_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            if entry.get("state") != "failed":
                entry.pop("error", None)
            _atomic_write(self.json_path, json.dumps(data, indent=2, sort_keys=True) + "\n")
            _atomic_write(self.md_path, self.markdown(data))
        return entry

    @staticmethod
    def markdown(data: dict[str, Any]) -> str:
        def order(entry: dict[str, Any]) -> tuple[int, Any]:
            job = str(entry.get("job"))
            return (0, int(job)) if job.isdigit() else (1, job)

        jobs = sorted(data["jobs"].values(), key=order)
        counts: dict[str, int] = {}
        for entry in jobs:
            counts[entry.get("state", "?")] = counts.get(entry.get("state", "?"), 0) + 1
        lines = [
            "# Sweep status",
            "",
            ", ".join(f"{state}: {n}" for state, n in sorted(counts.items())) or "no jobs yet",
            "",
            "| job | state | metric | overrides | updated (UTC) | error |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for entry in jobs:
            error = " ".join(str(entry.get("error") or "").split()).replace("|", "\\|")[:200]
            overrides = " ".join(entry.get("overrides") or []).replace("|", "\\|")
            lines.append(
                f"| {entry.get('job')} | {entry.get('state', '?')} | {_format_metric(entry.get('metric'))} "
                f"| {overrides} | {entry.get('updated_utc', '')} | {error} |"
            )
        return "\n".join(lines) + "\n"
