"""The shuffled-reward control (`algo.shuffle_rewards`): a training run that must not
learn. Each group's total rewards are permuted among its trajectories before the
cookbook computes advantages, so an episode is credited with a random group member's
reward, independent of what it did. Built only from tinker-cookbook's public API: the
group builder's `compute_group_rewards` returns (this stage of the training chain,
`piexp.env.training_pipeline`), for trajectory i, the total reward of trajectory
perm(i) minus i's own step rewards, so `TrajectoryGroup.get_total_rewards()`
(what `compute_advantages` centres) is the permuted list. The cookbook's logged
`reward/total` is a mean over the batch, which a permutation keeps; each trajectory's
true total is also recorded as the `shuffle_rewards/own_total` metric. The permutation
is uniform (it may leave a group unchanged: a derangement would hand an episode the
others' rewards, anti-correlated with its own, which is a signal) and seeded by the run
seed, step (the batch index) and the group's place in the batch, so a rerun shuffles
alike."""

from __future__ import annotations

import random
from dataclasses import dataclass

from piexp.env.group_wrappers import GradedGroup, Stage

__all__ = ["ShuffledRewards", "group_permutation"]


def group_permutation(size: int, seed: str) -> list[int]:
    """A uniform random permutation of range(size), the same for the same seed."""
    order = list(range(size))
    random.Random(seed).shuffle(order)  # str seeds hash deterministically (not PYTHONHASHSEED)
    return order


@dataclass(frozen=True)
class ShuffledRewards(Stage):
    """Each group's total rewards permuted, by the run seed, step and group."""

    run_seed: int

    def seed(self, step: int, group: int) -> str:
        return f"{self.run_seed}:{step}:{group}"

    def __call__(self, group: GradedGroup) -> None:
        step_sums, totals = group.step_and_totals()
        order = group_permutation(len(totals), self.seed(group.step, group.group))
        group.rewards = [
            (totals[order[i]] - step_sums[i], {**metrics, "shuffle_rewards/own_total": totals[i]})
            for i, (_, metrics) in enumerate(group.rewards)
        ]
