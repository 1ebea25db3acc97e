"""`checkpoint=` for `mode=eval policy=model`: a `tinker://` sampler path as given, or a
piexp training run folder, whose final sampler checkpoint (the last `sampler_path` in its
`checkpoints.jsonl`) is evaluated; with `service=local` the server then runs on that
run's own server state (`<run>/local_service`), where the checkpoint lives, and, since
a restarted SkyRL server samples only from models it holds, the checkpoint's recorded
state is loaded into a new model first (`piexp.policies.model`)."""

from __future__ import annotations

from piexp.run_folder import RunFolder

from dataclasses import dataclass
from pathlib import Path

from piexp.files import read_jsonl

__all__ = ["CHECKPOINTS_FILE", "CheckpointSource", "resolve_checkpoint"]

#: tinker-cookbook's record of the checkpoints a training run saved (one JSON per line).
CHECKPOINTS_FILE = RunFolder.CHECKPOINTS


@dataclass(frozen=True)
class CheckpointSource:
    sampler_path: str  # the tinker:// sampler checkpoint to sample from
    run_dir: Path | None  # the training run folder it came from, when one was given
    state_path: str | None = None  # the same checkpoint's full state (weights), when recorded


def resolve_checkpoint(value: str) -> CheckpointSource:
    """The sampler checkpoint `value` names; ValueError (one sentence) when a folder
    has none."""
    if value.startswith("tinker://"):
        return CheckpointSource(sampler_path=value, run_dir=None)
    run_dir = Path(value).expanduser().resolve()
    record = run_dir / CHECKPOINTS_FILE
    if not run_dir.is_dir():
        raise ValueError(f"checkpoint must be a tinker:// path or a piexp training run folder; {value!r} is neither")
    if not record.is_file():
        raise ValueError(f"checkpoint {value!r} is a folder without {CHECKPOINTS_FILE}: not a training run "
                         "that saved a checkpoint (mode=train saves one at its end)")  # fmt: skip
    sampler_path = state_path = None
    for row in read_jsonl(record):  # skips a line cut short by an interrupted write
        if row.get("sampler_path"):
            sampler_path = str(row["sampler_path"])
            state_path = str(row["state_path"]) if row.get("state_path") else None
    if sampler_path is None:
        raise ValueError(f"checkpoint {value!r}: {CHECKPOINTS_FILE} has no sampler checkpoint yet "
                         "(the run saves one at its end, or every mode.save_every steps)")  # fmt: skip
    return CheckpointSource(sampler_path=sampler_path, run_dir=run_dir, state_path=state_path)
