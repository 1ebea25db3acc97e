"""A training run records the episodes it trains on, in the transcript format of eval and
check (`train_transcripts.jsonl.gz`, capped the same way), each with the step (the
file's `iteration`) and group it belongs to, so `show`, the viewer, `replay` and
`rescore` read them too. The recording is the last stage of the training chain
(`TranscriptRecord`, given to `piexp.env.training_pipeline.training_chain` by
`RecordingDatasetBuilder`); a group's transcripts are written once its rewards are
computed, which the cookbook does for exactly the trajectories that enter the batch (a
failed or masked episode is not among them). A resumed run restarts at a checkpointed
step: transcripts of that step and later ones are dropped when the file is opened again
and recorded anew."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chz

from tinker_cookbook.renderers import Renderer
from tinker_cookbook.rl.types import Env

from piexp.config.schema import HarnessSettings, RunConfig
from piexp.env.episode import EpisodeEnvFactory, EpisodeSettings
from piexp.harness.base import run_harness

from piexp.env.dataset import WorkspaceDatasetBuilder
from piexp.env.group_wrappers import GradedGroup, RecordingStage, Stage
from piexp.policies.rollout import EpisodeRecord, fill_record
from piexp.tasks import Task
from piexp.transcripts.store import TRAIN_TRANSCRIPTS, TranscriptWriter

TRAIN_POLICY = "model"  # the policy name a training episode is recorded under


def transcript_position(transcript: dict[str, Any]) -> tuple[int, int, int]:
    """(step, group, sample): one training episode (the file calls the step `iteration`)."""
    return (
        int(transcript.get("iteration") or 0),
        int(transcript.get("group") or 0),
        int(transcript.get("sample") or 0),
    )


class _EarlierSteps:
    """The transcripts a resumed run keeps: those of steps before it restarted."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __contains__(self, key: Hashable) -> bool:
        return isinstance(key, tuple) and key[0] < self.step


class TrainRecorder:
    """The run's training transcript file, opened at the first group recorded; it keeps
    the transcripts of the steps before the first batch this process trains on
    (`resume_at`), or else before the first group's."""

    _open: dict[str, TranscriptWriter] = {}  # path -> writer, one per process
    _first_step: dict[str, int] = {}  # path -> the first step this process trains on

    @classmethod
    def resume_at(cls, path: str, step: int) -> None:
        cls._first_step[path] = step

    @classmethod
    def write(cls, path: str, step: int, transcripts: Sequence[dict[str, Any]]) -> None:
        writer = cls._open.get(path)
        if writer is None:
            keep = _EarlierSteps(cls._first_step.get(path, step))
            writer = cls._open[path] = TranscriptWriter(Path(path), keep=keep, key=transcript_position)
        for transcript in transcripts:
            writer.write(transcript)

    @classmethod
    def close(cls, path: str) -> None:
        cls._first_step.pop(path, None)
        writer = cls._open.pop(path, None)
        if writer is not None:
            writer.close()


def group_transcripts(group: GradedGroup) -> tuple[int, list[dict[str, Any]]]:
    """A graded group's step and its episodes' transcripts, with the rewards the stages
    before the recording left (what the episodes are trained on)."""
    workspace = group.workspace
    task, language = workspace.task, workspace.language
    transcripts = []
    _steps, totals = group.step_and_totals()
    for sample, (trajectory, env, total) in enumerate(zip(group.trajectories, group.envs, totals, strict=True)):
        played = getattr(env, "played", None)
        if isinstance(played, EpisodeRecord):
            # A harness's episode (Pi) carries its own record, graded from its trace.
            record = dataclasses.replace(played, sample=sample)
        else:
            record = EpisodeRecord.of(TRAIN_POLICY, task, language, sample)
            fill_record(record, trajectory, total, env, task, workspace.settings)
        assert record.transcript is not None
        record.transcript["sample"] = sample
        transcripts.append(
            {
                **record.transcript,
                "iteration": group.step,
                "group": group.group,
                "trained_reward": total,
                "task_digest": task.task_digest,
            }
        )
    return group.step, transcripts


@dataclass(frozen=True)
class TranscriptRecord(RecordingStage):
    """Each graded group's transcripts into the file at `path`; one played on another
    machine says which (`node`)."""

    path: str

    def recorder(self) -> Callable[[GradedGroup], tuple[int, list[dict[str, Any]]]]:
        return group_transcripts

    def commit(self, record: Any, played_on: str | None = None) -> None:
        step, transcripts = record
        if played_on is not None:
            transcripts = [{**transcript, "node": played_on} for transcript in transcripts]
        TrainRecorder.write(self.path, step, transcripts)

    def resume_at(self, step: int) -> None:
        TrainRecorder.resume_at(self.path, step)


@dataclass(frozen=True)
class HarnessTrainingEnv:
    """A harness's `training_env` as the groups carry it: by the harness's settings, so
    that a group pickles (rollouts=ray); it plays through this process's run harness."""

    harness: HarnessSettings

    def __call__(
        self, task: Task, language: str, settings: EpisodeSettings, renderer: Renderer, *, evaluation: bool
    ) -> Env:
        return run_harness(self.harness).training_env(task, language, settings, renderer, evaluation=evaluation)


@chz.chz
class RecordingDatasetBuilder(WorkspaceDatasetBuilder):
    """`WorkspaceDatasetBuilder` whose train groups record their episodes into
    `<run_dir>/train_transcripts.jsonl.gz`."""

    run_dir: str

    def run_folder(self) -> Path | None:
        return Path(self.run_dir)

    def transcript_stage(self) -> Stage | None:
        return TranscriptRecord(str(Path(self.run_dir) / TRAIN_TRANSCRIPTS))

    def episode_env(self, config: RunConfig) -> EpisodeEnvFactory:
        run_harness(config.harness)  # refused here, with the fix named, if it cannot run
        return HarnessTrainingEnv(config.harness)
