"""The episode runner that `mode=check` and `mode=eval` share: it plays a list of
(policy, task, language, sample) episodes at most `max_concurrency` at a time, shows their
progress (a live bar on a terminal, plain lines elsewhere and in job.log), cancels the
episodes still running when it is interrupted, and returns every record in the order the
episodes were given. `EpisodeLog` is the resumable record of finished episodes: each one
is appended to `episodes.jsonl` (its transcript just before it) the moment it finishes,
so a run killed half-way and started again on the same folder skips what is done."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tinker_cookbook.completers import TokenCompleter

from piexp.run_folder import RunFolder
from piexp.console import ProgressReport, say
from piexp.env.episode import EpisodeSettings
from piexp.files import read_jsonl
from piexp.policies.rollout import EpisodeRecord, run_episode
from piexp.tasks import Task
from piexp.transcripts.store import TranscriptWriter

EpisodeKey = tuple[str, str, int]  # (task id, language, sample): one finished episode


@dataclass(frozen=True)
class Episode:
    """One episode to play: `policy` (a name in the runner's policies) on `task` in
    `language`; `sample` tells the k samples of one task apart."""

    policy: str
    task: Task
    language: str
    sample: int = 0

    @property
    def key(self) -> EpisodeKey:
        return (self.task.task_id, self.language, self.sample)


# `piexp.policies.rollout.run_episode`, or a stand-in with its signature (a test's). The
# arguments are left open so that the signature is written once, on run_episode itself.
PlayEpisode = Callable[..., Awaitable[EpisodeRecord]]


async def run_episodes(
    episodes: Sequence[Episode],
    policies: Mapping[str, TokenCompleter],
    settings: EpisodeSettings,
    *,
    label: str,
    max_concurrency: int,
    on_record: Callable[[EpisodeRecord], None] | None = None,
    play: PlayEpisode = run_episode,
    retries: int = 0,
) -> list[EpisodeRecord]:
    """Play `episodes`; `on_record` sees each record as soon as its episode finishes (in
    the order they finish). A failed rollout is a record with `error` set, never an
    exception; one that failed for the sandbox's reasons is played again up to `retries`
    times first. An exception from `on_record`, an interruption or a sandbox gone for good
    (`SandboxDown`) stops the episodes still running before it propagates."""
    semaphore = asyncio.Semaphore(max_concurrency)
    replays = 0

    async def one(episode: Episode) -> EpisodeRecord:
        nonlocal replays
        async with semaphore:
            for attempt in range(retries + 1):
                replays += attempt > 0
                record = await play(
                    policies[episode.policy],
                    episode.policy,
                    episode.task,
                    episode.language,
                    settings,
                    sample=episode.sample,
                )
                if not record.infrastructure_failure:
                    break
            return record

    records: list[EpisodeRecord] = []
    with ProgressReport(label, len(episodes)) as progress:
        pending = [asyncio.ensure_future(one(episode)) for episode in episodes]
        try:
            for finished in asyncio.as_completed(pending):
                record = await finished
                progress.advance(note=f"{record.policy} {record.family} x {record.language}")
                if on_record is not None:
                    on_record(record)
                records.append(record)
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    if replays:
        say(f"{label}: {replays} episode(s) played again after the sandbox failed to run their program")
    order = {(episode.policy, *episode.key): i for i, episode in enumerate(episodes)}
    records.sort(key=lambda r: order[(r.policy, *r.key)])
    return records


class EpisodeLog:
    """`episodes.jsonl` and the transcripts file of a resumable run in `run_dir`. Each
    record carries its task's digest: a record of a task whose content changed since is
    not read back, so that episode is played again."""

    def __init__(self, run_dir: Path, transcripts: str, digests: Mapping[str, str]) -> None:
        self.path = Path(run_dir) / RunFolder.EPISODES
        self.transcripts_path = Path(run_dir) / transcripts
        self.digests = digests

    def finished(self) -> dict[EpisodeKey, EpisodeRecord]:
        """The records already on disk, by key (a truncated last line is skipped)."""
        finished: dict[EpisodeKey, EpisodeRecord] = {}
        if not self.path.exists():
            return finished
        for data in read_jsonl(self.path):
            if self.digests.get(str(data.get("task_id"))) != data.get("task_digest"):
                continue
            record = EpisodeRecord.from_json(data)
            finished[record.key] = record
        return finished

    @contextlib.contextmanager
    def appending(self, keep: Collection[tuple[str, str, str, int]]) -> Iterator[Callable[[EpisodeRecord], None]]:
        """Yields `append(record)`, which writes a finished episode's transcript and then
        its record. The transcripts file keeps only those of `keep` (policy, task id,
        language, sample): exactly the records kept from an earlier run."""
        if self.path.exists() and self.path.stat().st_size and not self.path.read_bytes().endswith(b"\n"):
            # The last run died mid-line: start on a fresh line so that record stays
            # unreadable (and is redone) instead of corrupting the next one.
            with self.path.open("a") as sink:
                sink.write("\n")
        with TranscriptWriter(self.transcripts_path, keep=keep) as transcripts, self.path.open("a") as sink:

            def append(record: EpisodeRecord) -> None:
                digest = self.digests[record.task_id]
                if record.transcript is not None:
                    transcripts.write({**record.transcript, "task_digest": digest})
                sink.write(json.dumps({**record.to_json(), "task_digest": digest}) + "\n")
                sink.flush()  # a finished episode survives an interruption right after it

            yield append
