"""The training pipeline: the train dataset the cookbook's RL loop draws its batches from,
built in one place, `training_chain`, which lists every training control in the order it
runs. A batch comes from the sampling the `tasks` options choose
(`piexp.env.dataset.train_sampling`: task order, family weights, difficulty pools,
adaptive difficulty), after a check that the sandbox is up; each of its groups is
wrapped once, in a `TrainingGroup`, which, once the group is graded, runs the run's
stages on it in order:

1. the shuffled-reward control (`algo.shuffle_rewards`, `piexp.env.shuffled_rewards`),
2. the binary gate (`algo.binary_gate`, `piexp.env.binary_gate`), on the totals left by 1,
3. the group's record (`piexp.env.group_outcomes`: `group_outcomes.jsonl`, which the
   outcome-driven sampling and the step metrics read), with the gate's decision,
4. its episodes' transcripts (`train_transcripts.jsonl.gz`; `piexp.launch.train_transcripts`
   supplies that stage, from the layer above), with the rewards they were trained on.

Every part calls the batch index `step` (files keep their keys: a transcript's
`iteration`). A resumed run has one rule for everything recorded: before the first
batch a process trains on, each stage drops what it recorded of that step and later
ones (`Stage.resume_at`), which are trained again. A new training control is a `Stage`
(here or in a module of its own) and a line in `training_chain`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory

from piexp.config.schema import RunConfig
from piexp.env.binary_gate import BinaryGate
from piexp.env.group_outcomes import OutcomeLog, OutcomeRecord
from piexp.env.group_wrappers import GradedGroup, GroupWrapper, RecordingStage, Stage
from piexp.env.shuffled_rewards import ShuffledRewards
from piexp.sandbox.availability import refuse_down_sandbox

__all__ = ["NodeGroup", "TrainingDataset", "TrainingGroup", "training_chain"]


@dataclass(frozen=True)
class TrainingGroup(GroupWrapper):
    """The dataset's group; once graded, its rewards pass through `stages` in order."""

    step: int
    group: int
    stages: tuple[Stage, ...]

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        rewards = await self.inner.compute_group_rewards(trajectory_group, env_group)
        graded = GradedGroup(self.step, self.group, self.inner, trajectory_group, env_group, rewards)
        for stage in self.stages:
            stage(graded)
        return graded.rewards

    def for_node(self) -> NodeGroup:
        """This group as another machine plays it: every stage that changes rewards runs
        there, each recording stage only makes its record there (`NodeGroup.records`),
        for `commit` here."""
        steps = tuple(stage.recorder() if isinstance(stage, RecordingStage) else stage for stage in self.stages)
        return NodeGroup(inner=self.inner, step=self.step, group=self.group, steps=steps)

    def commit(self, records: Sequence[Any], played_on: str | None) -> None:
        """Write the records a `NodeGroup` of this group made (its accepted result's)."""
        recording = [stage for stage in self.stages if isinstance(stage, RecordingStage)]
        for stage, record in zip(recording, records, strict=True):
            stage.commit(record, played_on)


@dataclass(frozen=True)
class NodeGroup(GroupWrapper):
    """A `TrainingGroup` sent to another machine (picklable: no file, no lock): `steps`
    are its stages, a recording stage's recorder in its place, whose records the group's
    grading leaves in `records`, in the stages' order."""

    step: int
    group: int
    steps: tuple[Stage | Callable[[GradedGroup], Any], ...]
    records: list[Any] = field(default_factory=list, compare=False)

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        rewards = await self.inner.compute_group_rewards(trajectory_group, env_group)
        graded = GradedGroup(self.step, self.group, self.inner, trajectory_group, env_group, rewards)
        self.records.clear()
        for step in self.steps:
            if isinstance(step, Stage):
                step(graded)
            else:
                self.records.append(step(graded))
        return graded.rewards


class TrainingDataset(RLDataset):
    """`sampling`'s batches, refused once the sandbox is marked down (a sandbox gone for
    good stops the run, `SandboxDown`, before any sampling is paid for), each group in a
    `TrainingGroup` with `stages`; the first batch asked for resumes every stage there."""

    def __init__(self, sampling: RLDataset, stages: Sequence[Stage], sandbox_url: str) -> None:
        self.sampling = sampling
        self.stages = tuple(stages)
        self.sandbox_url = sandbox_url
        self._resumed = False

    def get_batch(self, step: int) -> Sequence[EnvGroupBuilder]:
        refuse_down_sandbox(self.sandbox_url)
        if not self._resumed:
            self._resumed = True
            for stage in self.stages:
                stage.resume_at(step)
        batch = self.sampling.get_batch(step)
        if not self.stages:
            return batch
        return [
            TrainingGroup(inner=builder, step=step, group=group, stages=self.stages)
            for group, builder in enumerate(batch)
        ]

    def set_epoch(self, seed: int = 0) -> None:
        self.sampling.set_epoch(seed)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.sampling)


def training_chain(
    config: RunConfig,
    sampling: RLDataset,
    sandbox_url: str,
    log: OutcomeLog,
    *,
    run_dir: Path | None,
    record_outcomes: bool,
    transcripts: Stage | None = None,
) -> TrainingDataset:
    """The whole train dataset: `sampling` (which reads `log` if it is outcome-driven)
    and the run's stages in the order they run on a graded group. `record_outcomes`:
    whether anything reads the group records (a run folder or an outcome-driven
    sampler); `transcripts`: the stage that records the episodes, last."""
    stages: list[Stage] = []
    if config.algo.shuffle_rewards:  # the control run: rewards permuted within each group
        stages.append(ShuffledRewards(config.seed))
    if config.algo.binary_gate:  # groups of equal binary outcomes dropped, on the totals above
        stages.append(BinaryGate(run_dir))
    if record_outcomes:  # the group records, with the gate's decision
        stages.append(OutcomeRecord(log))
    if transcripts is not None:  # the episodes, with the rewards they are trained on
        stages.append(transcripts)
    return TrainingDataset(sampling, stages, sandbox_url)
