"""Live sweep status: `sweep_status.json` and `sweep_status.md` in the sweep folder.

Jobs run in separate processes (joblib) or on separate machines sharing a file system
(submitit), so each update is a read-modify-write under an exclusive `flock` on a lock
file next to the status files (on NFS, Linux maps it to a POSIX lock the server holds;
Lustre needs its `flock` mount option), and the files are replaced atomically: a reader
(`cat`, `watch`, an editor) never sees half a table. Every write also judges each
`running` entry (`piexp.sweeps.liveness`), so while any job of the sweep lives, a killed
or silent one shows as `interrupted` or `stale`, not `running`; `python -m piexp status`
does the same when nothing is left alive.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from piexp.files import atomic_write_text
from piexp.sweeps.liveness import STALE_AFTER_S, Owner, judge, utc_now

STATUS_JSON = RunFolder.SWEEP_STATUS_JSON
STATUS_MD = RunFolder.SWEEP_STATUS_MD
_LOCK = RunFolder.SWEEP_STATUS_LOCK
# States whose entry keeps its `error` (the failure, or why a job is not running).
_REASONED = {"failed", "interrupted", "stale"}


def _format_metric(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _clock(stamp: Any) -> str:
    """`2026-01-01 12:00:00` from an ISO time stamp (empty when there is none)."""
    return str(stamp or "")[:19].replace("T", " ")


def _stamp() -> str:
    return utc_now().isoformat(timespec="seconds")


class SweepStatus:
    """The status table of one sweep folder (or of one run, in `<run>/.piexp/`); every
    method that writes is safe across processes and hosts."""

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
        """The table as last written (not judged; see `judged`)."""
        try:
            data = json.loads(self.json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"jobs": {}}
        return data if isinstance(data, dict) and isinstance(data.get("jobs"), dict) else {"jobs": {}}

    def judged(self) -> dict[str, Any]:
        """The table with each `running` entry judged (nothing written)."""
        return self._judge(self.read())

    @staticmethod
    def _judge(data: dict[str, Any]) -> dict[str, Any]:
        now = utc_now()
        for entry in data["jobs"].values():
            state, reason = judge(entry, now)
            if state != entry.get("state"):
                entry.update(state=state, error=reason)
        return data

    def _write(self, data: dict[str, Any]) -> None:
        self._judge(data)
        data["written_utc"] = _stamp()
        atomic_write_text(self.json_path, json.dumps(data, indent=2, sort_keys=True) + "\n")
        atomic_write_text(self.md_path, self.markdown(data))

    def update(self, job: int | str, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into the entry of `job` and rewrite both files."""
        with self._locked():
            data = self.read()
            entry = data["jobs"].setdefault(str(job), {"job": job})
            entry.update(fields)
            entry["updated_utc"] = _stamp()
            if entry.get("state") not in _REASONED:
                entry.pop("error", None)
            self._write(data)
        return entry

    def claim(self, job: int | str, owner: Owner, **fields: Any) -> dict[str, Any] | None:
        """Mark `job` running by `owner`, unless another live process runs it: then
        return that entry and write nothing (one check-and-set under the lock, so two
        launches of the same job cannot both start it)."""
        with self._locked():
            data = self._judge(self.read())
            entry = data["jobs"].get(str(job))
            if entry is not None and entry.get("state") == "running" and not owner.owns(entry):
                return dict(entry)
            now = _stamp()
            entry = data["jobs"].setdefault(str(job), {"job": job})
            entry.update(
                fields,
                **owner.fields(),
                state="running",
                metric=None,
                started_utc=now,
                heartbeat_utc=now,
                finished_utc=None,
                updated_utc=now,
            )
            entry.pop("error", None)
            self._write(data)
        return None

    def heartbeat(self, job: int | str, owner: Owner) -> bool:
        """Refresh the heartbeat of `job` if `owner` still runs it (a job taken over by
        a later launch, or one already ended, is left alone); False when it does not. A
        live owner judged `stale` or `interrupted` (a slow file system, a pid probed from
        another pid namespace) is running again: it is the one writing."""
        with self._locked():
            data = self.read()
            entry = data["jobs"].get(str(job))
            if entry is None or not owner.owns(entry) or entry.get("state") not in ("running", "stale", "interrupted"):
                return False
            entry.update(state="running", heartbeat_utc=_stamp())
            entry.pop("error", None)
            self._write(data)
        return True

    def keep_only(self, jobs: Iterable[int | str]) -> None:
        """Drop the rows of jobs not in `jobs` (left by an earlier, larger sweep in the same
        folder), so the table and the summaries that read it show only this sweep."""
        if not self.json_path.is_file():
            return
        wanted = {str(job) for job in jobs}
        with self._locked():
            data = self.read()
            gone = [job for job in data["jobs"] if job not in wanted]
            if gone:
                for job in gone:
                    del data["jobs"][job]
                self._write(data)

    def refresh(self) -> dict[str, Any]:
        """Judge every entry and rewrite the files with the result, so they tell the truth
        even when no job is left alive to do it; a read-only folder is only read."""
        try:
            with self._locked():
                data = self.read()
                if data["jobs"]:
                    self._write(data)
                return data
        except OSError:
            return self.judged()

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
            f"Written {data.get('written_utc', '?')} UTC. A `running` job refreshes its heartbeat every few "
            f"seconds; one whose heartbeat is older than {STALE_AFTER_S:.0f} s is not running: "
            "`python -m piexp status DIR` shows it as `stale` or `interrupted`.",
            "",
            "| job | state | metric | overrides | host:pid | started (UTC) | ended (UTC) | heartbeat (UTC) "
            "| error or reason |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for entry in jobs:
            error = " ".join(str(entry.get("error") or "").split()).replace("|", "\\|")[:200]
            overrides = " ".join(entry.get("overrides") or []).replace("|", "\\|")
            where = f"{entry['host']}:{entry.get('pid')}" if entry.get("host") else ""
            beat = str(entry.get("heartbeat_utc") or "")[11:19]
            lines.append(
                f"| {entry.get('job')} | {entry.get('state', '?')} | {_format_metric(entry.get('metric'))} "
                f"| {overrides} | {where} | {_clock(entry.get('started_utc'))} | {_clock(entry.get('finished_utc'))} "
                f"| {beat} | {error} |"
            )
        return "\n".join(lines) + "\n"
