"""Datasets of workspace groups, and the RLDatasetBuilder tinker-cookbook's loop calls."""

from __future__ import annotations

from collections.abc import Sequence

import chz
from tinker_cookbook.rl.rollout_presets import RolloutConfig
from tinker_cookbook.rl.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder

from piexp.config.schema import RunConfig
from piexp.env.episode import EpisodeSettings, WorkspaceGroupBuilder
from piexp.env.group_wrappers import WrappingDataset
from piexp.env.rollout_policy import rollout_config
from piexp.env.shuffled_rewards import ShuffledRewardDataset
from piexp.env.splits import build_splits
from piexp.sandbox.availability import refuse_down_sandbox
from piexp.sandbox.url import ensure_loopback_url
from piexp.tasks import Task


def group_builders(
    tasks: Sequence[Task],
    languages: Sequence[str],
    settings: EpisodeSettings,
    group_size: int,
    *,
    evaluation: bool,
) -> list[WorkspaceGroupBuilder]:
    """One group per (task, language), languages in schedule order within each task."""
    return [
        WorkspaceGroupBuilder(
            task=task, language=language, settings=settings, group_size=group_size, evaluation=evaluation
        )
        for task in tasks
        for language in languages
    ]


class HealthCheckedDataset(WrappingDataset):
    """The inner dataset, refusing a batch once the sandbox is marked down, so a sandbox
    gone for good stops the run (`SandboxDown`) before any sampling is paid for."""

    def __init__(self, inner: RLDataset, sandbox_url: str) -> None:
        super().__init__(inner)
        self.sandbox_url = sandbox_url

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        refuse_down_sandbox(self.sandbox_url)
        return super().get_batch(index)


class RepeatingDataset(RLDataset):
    """Cycles through its groups; `set_epoch(seed)` shifts where batches start.

    With `n_batches` set the dataset has exactly that many batches (the run's
    `mode.max_steps`: it cycles when there are fewer groups, and stops early when there
    are more); without it, one pass over the groups."""

    def __init__(self, builders: Sequence[EnvGroupBuilder], batch_size: int, n_batches: int | None) -> None:
        self.builders = list(builders)
        self.batch_size = batch_size
        self.n_batches = n_batches
        self.offset = 0

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not self.builders:
            return []
        start = (index * self.batch_size + self.offset) % len(self.builders)
        return [
            self.builders[(start + position) % len(self.builders)]
            for position in range(min(self.batch_size, len(self.builders)))
        ]

    def set_epoch(self, seed: int = 0) -> None:
        self.offset = seed % max(1, len(self.builders))

    def __len__(self) -> int:
        if self.n_batches is not None:
            return self.n_batches
        return (len(self.builders) + self.batch_size - 1) // self.batch_size


class WeightedFamilyDataset(RLDataset):
    """`tasks.family_weights`: every batch mixes the families by weight. Slot g of the run
    (batch index x batch size + position) goes to the family furthest behind its share
    (smooth weighted round-robin: after n slots each family has had weight/total x n of
    them, give or take one; ties go to the family listed first), which takes its next group
    in its own cycle. No state: a batch depends only on its index, so a resumed run gets
    the same batches."""

    def __init__(
        self, builders: Sequence[WorkspaceGroupBuilder], weights: dict[str, float], batch_size: int, n_batches: int
    ) -> None:
        self.families = [name for name in dict.fromkeys(builder.task.family for builder in builders)]
        self.groups = {name: [b for b in builders if b.task.family == name] for name in self.families}
        total = sum(weights.get(name, 1.0) for name in self.families)
        self.shares = [weights.get(name, 1.0) / total for name in self.families]
        self.batch_size = batch_size
        self.n_batches = n_batches
        self._schedule: list[tuple[int, int]] = []  # slot -> (family index, its occurrence)
        self._counts = [0] * len(self.families)  # slots each family has had in the schedule so far

    def _slot(self, slot: int) -> tuple[int, int]:
        counts = self._counts
        while len(self._schedule) <= slot:
            n = len(self._schedule) + 1
            family = max(range(len(self.families)), key=lambda f: (self.shares[f] * n - counts[f], -f))
            self._schedule.append((family, counts[family]))
            counts[family] += 1
        return self._schedule[slot]

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        batch: list[EnvGroupBuilder] = []
        for position in range(self.batch_size):
            family, occurrence = self._slot(index * self.batch_size + position)
            groups = self.groups[self.families[family]]
            batch.append(groups[occurrence % len(groups)])
        return batch

    def set_epoch(self, seed: int = 0) -> None:
        pass  # the schedule is fixed by the weights; the run's seed already shaped the tasks

    def __len__(self) -> int:
        return self.n_batches


def episode_settings(config: RunConfig, sandbox_url: str) -> EpisodeSettings:
    return EpisodeSettings(
        model_name=config.model.name,
        renderer_name=config.model.renderer,
        languages=dict(config.languages),
        limits=config.limits,
        reward=config.reward,
        sandbox_url=sandbox_url,
        memory_limit_mb=config.sandbox.memory_limit_mb,
        rollout=rollout_config(config.model.name, config.limits, config.algo),
        infrastructure_errors=config.algo.infrastructure_errors,
        sandbox_wait_s=config.sandbox.unavailable_after_s,
    )


@chz.chz
class WorkspaceDatasetBuilder(RLDatasetBuilder):
    """Serialisable: the validated run config as JSON plus the sandbox URL. Builds both
    splits, refusing any overlap, and returns (train, eval) datasets."""

    config_json: str
    sandbox_url: str

    def episode_rollout_config(self) -> RolloutConfig:
        """The cookbook RolloutConfig every episode of the run is built with."""
        config = RunConfig.model_validate_json(self.config_json)
        return rollout_config(config.model.name, config.limits, config.algo)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        ensure_loopback_url(self.sandbox_url)
        config = RunConfig.model_validate_json(self.config_json)
        splits = build_splits(config)
        settings = episode_settings(config, self.sandbox_url)
        assert config.mode.name == "train", "the dataset builder serves training runs"
        train = group_builders(splits.train, config.train_languages, settings, config.mode.group_size, evaluation=False)
        evaluation = group_builders(splits.eval, config.eval_languages, settings, 1, evaluation=True)
        train_dataset: RLDataset = RepeatingDataset(train, config.mode.groups_per_batch, config.mode.max_steps)
        if config.tasks.family_weights is not None:  # families mixed in every batch by weight
            train_dataset = WeightedFamilyDataset(
                train, config.tasks.family_weights, config.mode.groups_per_batch, config.mode.max_steps
            )
        if config.algo.shuffle_rewards:  # the control run: rewards permuted within each group
            train_dataset = ShuffledRewardDataset(train_dataset, config.seed)
        train_dataset = HealthCheckedDataset(train_dataset, self.sandbox_url)
        return train_dataset, RepeatingDataset(evaluation, len(evaluation), None)
