"""A training run records the episodes it trains on, in the transcript format of eval and
check (`train_transcripts.jsonl.gz`, capped the same way), each with the iteration and
group it belongs to, so `show`, the viewer, `replay` and `rescore` read them too. The
train dataset's groups are wrapped (`RecordingDataset`); a group's transcripts are written
once its rewards are computed, which the cookbook does for exactly the trajectories that
enter the batch (a failed or masked episode is not among them). A resumed run restarts
at a checkpointed iteration: transcripts of that iteration and later ones are dropped
when the file is opened again and recorded anew."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chz
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory

from piexp.config.schema import RunConfig
from piexp.env.binary_gate import GATE_FILE, BinaryGateDataset
from piexp.env.dataset import WorkspaceDatasetBuilder
from piexp.env.group_outcomes import workspace_group
from piexp.env.group_wrappers import GroupWrapper, WrappingDataset, step_and_total_rewards
from piexp.policies.rollout import EpisodeRecord, fill_record
from piexp.transcripts.store import TRAIN_TRANSCRIPTS, TranscriptWriter

TRAIN_POLICY = "model"  # the policy name a training episode is recorded under


def transcript_position(transcript: dict[str, Any]) -> tuple[int, int, int]:
    """(iteration, group, sample): one training episode."""
    return (
        int(transcript.get("iteration") or 0),
        int(transcript.get("group") or 0),
        int(transcript.get("sample") or 0),
    )


class _EarlierIterations:
    """The transcripts a resumed run keeps: those of iterations before it restarted."""

    def __init__(self, iteration: int) -> None:
        self.iteration = iteration

    def __contains__(self, key: Hashable) -> bool:
        return isinstance(key, tuple) and key[0] < self.iteration


class TrainRecorder:
    """The run's training transcript file, opened at the first group recorded."""

    _open: dict[str, TranscriptWriter] = {}  # path -> writer, one per process

    @classmethod
    def write(cls, path: str, iteration: int, transcripts: Sequence[dict[str, Any]]) -> None:
        writer = cls._open.get(path)
        if writer is None:
            writer = cls._open[path] = TranscriptWriter(
                Path(path), keep=_EarlierIterations(iteration), key=transcript_position
            )
        for transcript in transcripts:
            writer.write(transcript)

    @classmethod
    def close(cls, path: str) -> None:
        writer = cls._open.pop(path, None)
        if writer is not None:
            writer.close()


@dataclass(frozen=True)
class RecordingGroupBuilder(GroupWrapper):
    """The inner group; its trajectories' transcripts are recorded once graded."""

    iteration: int
    group: int
    path: str

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        rewards = await self.inner.compute_group_rewards(trajectory_group, env_group)
        workspace = workspace_group(self.inner)
        task, language = workspace.task, workspace.language
        transcripts = []
        _steps, totals = step_and_total_rewards(trajectory_group, rewards)
        for sample, (trajectory, env, total) in enumerate(zip(trajectory_group, env_group, totals, strict=True)):
            record = EpisodeRecord.of(TRAIN_POLICY, task, language, sample)
            fill_record(record, trajectory, total, env, task, workspace.settings)
            assert record.transcript is not None
            transcripts.append(
                {**record.transcript, "iteration": self.iteration, "group": self.group, "trained_reward": total}
            )
        TrainRecorder.write(self.path, self.iteration, transcripts)
        return rewards


class RecordingDataset(WrappingDataset):
    """The inner dataset's batches, each group recorded (`RecordingGroupBuilder`)."""

    def __init__(self, inner: RLDataset, path: str) -> None:
        super().__init__(inner)
        self.path = path

    def wrap(self, builder: EnvGroupBuilder, index: int, position: int) -> EnvGroupBuilder:
        return RecordingGroupBuilder(inner=builder, iteration=index, group=position, path=self.path)


@chz.chz
class RecordingDatasetBuilder(WorkspaceDatasetBuilder):
    """`WorkspaceDatasetBuilder` whose train groups record their episodes into
    `<run_dir>/train_transcripts.jsonl.gz`."""

    run_dir: str

    def run_folder(self) -> Path | None:
        return Path(self.run_dir)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train, evaluation = await super().__call__()
        if RunConfig.model_validate_json(self.config_json).algo.binary_gate:
            train = BinaryGateDataset(train, str(Path(self.run_dir) / GATE_FILE))
        return RecordingDataset(train, str(Path(self.run_dir) / TRAIN_TRANSCRIPTS)), evaluation
