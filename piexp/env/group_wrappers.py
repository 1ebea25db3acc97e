"""One way to wrap a training dataset's groups: `GroupWrapper` delegates every
`EnvGroupBuilder` call to the group it wraps (a wrapper overrides what it changes, most
often `compute_group_rewards`), and `WrappingDataset` hands out the inner dataset's
batches with each group wrapped by `wrap(builder, batch index, position)`. The
shuffled-reward control, the binary gate and the training record are such wrappers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory


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


class WrappingDataset(RLDataset):
    """The inner dataset's batches, each group passed through `wrap`."""

    def __init__(self, inner: RLDataset) -> None:
        self.inner = inner

    def wrap(self, builder: EnvGroupBuilder, index: int, position: int) -> EnvGroupBuilder:
        return builder

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [self.wrap(builder, index, position) for position, builder in enumerate(self.inner.get_batch(index))]

    def set_epoch(self, seed: int = 0) -> None:
        self.inner.set_epoch(seed)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.inner)
