"""What a training control works on: a graded group (`GradedGroup`: its place in the run,
its trajectories and the rewards the controls before it left) and the `Stage` a control
is, which may change those rewards or record what it saw. `GroupWrapper` delegates every
`EnvGroupBuilder` call to the group it wraps; the train dataset's one wrapper,
`piexp.env.training_pipeline.TrainingGroup`, runs a run's stages in order once a group is
graded, and an episode runner keeps a group's envs with another."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, Trajectory

from piexp.env.episode import WorkspaceGroupBuilder


def step_and_total_rewards(
    trajectory_group: Sequence[Trajectory], finals: Sequence[tuple[float, Metrics]]
) -> tuple[list[float], list[float]]:
    """Each trajectory's sum of step rewards, and its total (those plus its final group
    reward): what the cookbook's advantages centre."""
    step_sums = [sum(transition.reward for transition in trajectory.transitions) for trajectory in trajectory_group]
    return step_sums, [steps + final for steps, (final, _) in zip(step_sums, finals, strict=True)]


@dataclass(frozen=True)
class GroupWrapper(EnvGroupBuilder):
    """The inner group builder, unchanged until a subclass overrides a method."""

    inner: EnvGroupBuilder

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        return await self.inner.compute_group_rewards(trajectory_group, env_group)

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    def logging_tags(self) -> list[str]:
        return self.inner.logging_tags()


def with_sandbox(builder: EnvGroupBuilder, sandbox_url: str) -> EnvGroupBuilder:
    """`builder` (inside any number of `GroupWrapper`s) with its episodes' programs run by
    the sandbox at `sandbox_url`: a group played on another machine uses that machine's."""
    if isinstance(builder, GroupWrapper):
        return dataclasses.replace(builder, inner=with_sandbox(builder.inner, sandbox_url))
    assert isinstance(builder, WorkspaceGroupBuilder), f"a training group is piexp's, not {type(builder)}"
    return dataclasses.replace(builder, settings=dataclasses.replace(builder.settings, sandbox_url=sandbox_url))


def workspace_group(builder: EnvGroupBuilder) -> WorkspaceGroupBuilder:
    """The piexp workspace group inside any number of `GroupWrapper`s."""
    while isinstance(builder, GroupWrapper):
        builder = builder.inner
    assert isinstance(builder, WorkspaceGroupBuilder), f"a training group is piexp's, not {type(builder)}"
    return builder


@dataclass(frozen=True)
class GateDecision:
    """The binary gate's decision on a group: whether it was dropped, and the shaped totals
    it decided on (each trajectory's, before the gate set a dropped group's to 0)."""

    dropped: bool
    shaped_totals: tuple[float, ...]


@dataclass
class GradedGroup:
    """One graded training group as the stages see it, in order: `step` is the batch index
    (the cookbook's training step) and `group` the group's place in that batch;
    `rewards` are the final group rewards with their metrics (the cookbook adds each
    trajectory's step rewards to its final one), which a stage may replace."""

    step: int
    group: int
    builder: EnvGroupBuilder  # the dataset's group, piexp's workspace group
    trajectories: list[Trajectory]
    envs: Sequence[Env]
    rewards: list[tuple[float, Metrics]]
    gate: GateDecision | None = None  # set by the binary gate, when it is on

    @property
    def workspace(self) -> WorkspaceGroupBuilder:
        return workspace_group(self.builder)

    def step_and_totals(self) -> tuple[list[float], list[float]]:
        """Each trajectory's step rewards and its total under the current rewards."""
        return step_and_total_rewards(self.trajectories, self.rewards)


class Stage:
    """A training control's part in the chain: `__call__` runs on every graded group, in
    the chain's order; `resume_at` runs once, before the first batch a process trains
    on (a fresh run: 0; a resumed one: its checkpoint's step), and drops whatever the
    stage recorded of that step and later ones: they are trained again."""

    def __call__(self, group: GradedGroup) -> None:
        raise NotImplementedError

    def resume_at(self, step: int) -> None:
        pass


class RecordingStage(Stage):
    """A stage that records what it saw into the run's files and changes no reward. Its
    work is split in two so that a group may be graded on another machine: `recorder`
    (a picklable function of the graded group, run where the group was played) makes
    the record, and `commit` (run where the run's files are, once for the group's one
    accepted result) writes it; `played_on` names the machine that played it, if not
    this one."""

    def recorder(self) -> Callable[[GradedGroup], Any]:
        raise NotImplementedError

    def commit(self, record: Any, played_on: str | None = None) -> None:
        raise NotImplementedError

    def __call__(self, group: GradedGroup) -> None:
        self.commit(self.recorder()(group))
