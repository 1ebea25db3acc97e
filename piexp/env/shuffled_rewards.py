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

from piexp.env.group_wrappers import GroupWrapper, WrappingDataset, step_and_total_rewards

__all__ = ["ShuffledRewardDataset", "ShuffledRewardGroupBuilder", "group_permutation"]


def group_permutation(size: int, seed: str) -> list[int]:
    """A uniform random permutation of range(size), the same for the same seed."""
    order = list(range(size))
    random.Random(seed).shuffle(order)  # str seeds hash deterministically (not PYTHONHASHSEED)
    return order


@dataclass(frozen=True)
class ShuffledRewardGroupBuilder(GroupWrapper):
    """The inner group builder, its trajectories' total rewards permuted by `seed`."""

    seed: str

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        inner = await self.inner.compute_group_rewards(trajectory_group, env_group)
        step_sums, totals = step_and_total_rewards(trajectory_group, inner)
        order = group_permutation(len(totals), self.seed)
        return [
            (totals[order[i]] - step_sums[i], {**metrics, "shuffle_rewards/own_total": totals[i]})
            for i, (_, metrics) in enumerate(inner)
        ]


class ShuffledRewardDataset(WrappingDataset):
    """The inner dataset's batches, each group wrapped in a ShuffledRewardGroupBuilder."""

    def __init__(self, inner: RLDataset, run_seed: int) -> None:
        super().__init__(inner)
        self.run_seed = run_seed

    def wrap(self, builder: EnvGroupBuilder, index: int, position: int) -> EnvGroupBuilder:
        return ShuffledRewardGroupBuilder(inner=builder, seed=f"{self.run_seed}:{index}:{position}")
