"""Transcripts on disk: one gzip-compressed JSON line per episode, next to the episode
records (`transcripts.jsonl.gz` beside eval's `episodes.jsonl`, `check_transcripts.jsonl.gz`
beside `check.json`, `train_transcripts.jsonl.gz` in a training run).

The file is one gzip stream flushed after every line, so a process killed mid-run leaves
every finished transcript readable. Opening a writer rewrites the file with only the
transcripts of episodes the caller still counts as finished (one per episode, the last),
so a resume leaves no orphan (a transcript whose record was never written) and no
duplicate. A transcript is written before its episode record; an interruption between the
two leaves an orphan that the next resume drops and reruns.

Per-run cap: once `RUN_BYTES` compressed bytes are written, later episodes get a stub
(their identity, reward and stop reason, and `omitted` saying why) instead of the
conversation, so the file stays bounded and still has one line per episode.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import gzip
import json
import os
import zlib
from collections.abc import Callable, Container, Hashable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

EVAL_TRANSCRIPTS = RunFolder.EVAL_TRANSCRIPTS
CHECK_TRANSCRIPTS = RunFolder.CHECK_TRANSCRIPTS
TRAIN_TRANSCRIPTS = RunFolder.TRAIN_TRANSCRIPTS  # a training run's episodes, each with its iteration
# The episodes a run folder can hold, by source: what `show --source`, `rescore --source`
# and `replay --source` name, and the file each is recorded in.
SOURCE_TRANSCRIPTS: dict[str, str] = {"train": TRAIN_TRANSCRIPTS, "eval": EVAL_TRANSCRIPTS, "check": CHECK_TRANSCRIPTS}
SOURCE_WORDS = {"train": "training episodes", "eval": "eval episodes", "check": "check (preflight) episodes"}


def default_source(mode: str | None) -> str:
    """The episodes a command reads of a run by default: those its mode played (a training
    run's training episodes, not its preflight check's)."""
    return mode if mode in SOURCE_TRANSCRIPTS else "eval"


# Compressed bytes one run's transcript file may reach before episodes are stubbed.
RUN_BYTES = 512 * 1024 * 1024
# Which episode a transcript or an episode record is: a stub keeps them, as does an
# index row (runs.ROW_FIELDS).
EPISODE_IDENTITY = ("policy", "task_id", "family", "split", "language", "sample")
_STUB_FIELDS = (
    "version",
    *EPISODE_IDENTITY,
    "answer",
    "expected",
    "reward",
    "shaped",
    "metrics",
    "stop_reason",
    "failures",
    "wall_s",
)


def transcript_key(transcript: dict[str, Any]) -> tuple[str, str, str, int]:
    """(policy, task_id, language, sample): one episode of a run."""
    return (
        str(transcript.get("policy")),
        str(transcript.get("task_id")),
        str(transcript.get("language")),
        int(transcript.get("sample") or 0),
    )


def read_transcripts(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete transcript line of `path` (a file cut short by a kill ends early)."""
    if not path.is_file():
        return
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        try:
            for line in handle:
                try:
                    data = json.loads(line)
                except ValueError:
                    continue  # the line being written when the process died
                if isinstance(data, dict):
                    yield data
        except (EOFError, OSError, zlib.error):
            return  # the stream's end was never written (killed): what came before is kept


class TranscriptWriter:
    """Appends transcripts to a run's file; see the module doc for resume and caps."""

    def __init__(
        self,
        path: Path,
        keep: Container[Hashable] = (),
        key: Callable[[dict[str, Any]], Hashable] = transcript_key,
        run_bytes: int = RUN_BYTES,
    ) -> None:
        self.path = Path(path)
        self.run_bytes = run_bytes
        kept: dict[Hashable, dict[str, Any]] = {}
        for transcript in read_transcripts(self.path):
            if key(transcript) in keep:
                kept[key(transcript)] = transcript
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        self._raw: BinaryIO = open(temporary, "wb")  # noqa: SIM115 - closed in close()
        self._gzip = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6)
        for transcript in kept.values():
            self._line(transcript)
        self._gzip.flush()
        os.replace(temporary, self.path)  # the open handle keeps writing the renamed file

    def _line(self, transcript: dict[str, Any]) -> None:
        self._gzip.write(json.dumps(transcript, separators=(",", ":")).encode() + b"\n")

    def write(self, transcript: dict[str, Any]) -> None:
        if self._raw.tell() >= self.run_bytes:
            transcript = {name: transcript.get(name) for name in _STUB_FIELDS}
            transcript["omitted"] = f"conversation not kept: the run's transcripts reached {self.run_bytes} bytes"
        self._line(transcript)
        self._gzip.flush()  # a sync flush: this line is readable even if the process dies now

    def close(self) -> None:
        self._gzip.close()
        self._raw.close()

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
