"""The shuffled-reward control (`algo.shuffle_rewards`): a training run that must not
learn. Each group's total rewards are permuted among its trajectories before the
cookbook computes advantages, so an episode is credited with a random group member's
reward, independent of what it did. Built only from tinker-cookbook's public API: the
group builder's `compute_group_rewards` returns, for trajectory i, the total reward of
trajectory perm(i) minus i's own step rewards, so `TrajectoryGroup.get_total_rewards()`
(what `compute_advantages` centres) is the permuted list. The cookbook's logged
`reward/total` is a mean over the batch, which a permutation keeps; each trajectory's
true total is also recorded as the `shuffle_rewards/own_total` metric. The permutation
is uniform (it may leave a group unchanged: a derangement would hand an episode the
others' rewards, anti-correlated with its own, which is a signal) and seeded by the run
seed, batch index and the group's place in the batch, so a rerun shuffles alike."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from tinker_cookbook.rl.types import Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory

__all__ = ["ShuffledRewardDataset", "ShuffledRewardGroupBuilder", "group_permutation"]


def group_permutation(size: int, seed: str) -> list[int]:
    """A uniform random permutation of range(size), the same for the same seed."""
    order = list(range(size))
    random.Random(seed).shuffle(order)  # str seeds hash deterministically (not PYTHONHASHSEED)
    return order


@dataclass(frozen=True)
class ShuffledRewardGroupBuilder(EnvGroupBuilder):
    """The inner group builder, its trajectories' total rewards permuted by `seed`."""

    inner: EnvGroupBuilder
    seed: str

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        inner = await self.inner.compute_group_rewards(trajectory_group, env_group)
        step_sums = [sum(transition.reward for transition in trajectory.transitions) for trajectory in trajectory_group]
        totals = [steps + final for steps, (final, _) in zip(step_sums, inner, strict=True)]
        order = group_permutation(len(totals), self.seed)
        return [
            (totals[order[i]] - step_sums[i], {**metrics, "shuffle_rewards/own_total": totals[i]})
            for i, (_, metrics) in enumerate(inner)
        ]

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    def logging_tags(self) -> list[str]:
        return self.inner.logging_tags()


class ShuffledRewardDataset(RLDataset):
    """The inner dataset's batches, each group wrapped in a ShuffledRewardGroupBuilder."""

    def __init__(self, inner: RLDataset, run_seed: int) -> None:
        self.inner = inner
        self.run_seed = run_seed

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [
            ShuffledRewardGroupBuilder(inner=builder, seed=f"{self.run_seed}:{index}:{position}")
            for position, builder in enumerate(self.inner.get_batch(index))
        ]

    def set_epoch(self, seed: int = 0) -> None:
        self.inner.set_epoch(seed)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.inner)
