"""Datasets of workspace groups, and the RLDatasetBuilder tinker-cookbook's loop calls: it
builds the splits, the sampling the `tasks` options choose (task order, family weights,
difficulty pools or adaptive difficulty: `train_sampling`), and hands it to
`piexp.env.training_pipeline.training_chain`, which adds every training control in
order; the online controls' per-step metrics read the run's group records
(`TrainingControls`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import chz
from tinker_cookbook.rl.rollout_presets import RolloutConfig
from tinker_cookbook.rl.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder

from piexp.config.schema import RunConfig, TrainMode
from piexp.env.adaptive_difficulty import AdaptiveDifficultyDataset
from piexp.env.episode import EpisodeEnvFactory, EpisodeSettings, WorkspaceGroupBuilder, reference_env
from piexp.env.family_schedule import FamilySchedule
from piexp.env.group_outcomes import OUTCOMES_FILE, OutcomeLog
from piexp.env.group_wrappers import Stage
from piexp.env.rollout_policy import rollout_config
from piexp.env.splits import RunSplits, build_splits
from piexp.env.task_sampler import DifficultyPoolsDataset, OutcomeDrivenDataset, TrainingControls
from piexp.env.training_pipeline import training_chain
from piexp.sandbox.url import ensure_loopback_url
from piexp.tasks import Task


def group_builders(
    tasks: Sequence[Task],
    languages: Sequence[str],
    settings: EpisodeSettings,
    group_size: int,
    *,
    evaluation: bool,
    episode_env: EpisodeEnvFactory = reference_env,
) -> list[WorkspaceGroupBuilder]:
    """One group per (task, language), languages in schedule order within each task, each
    episode built by `episode_env`."""
    return [
        WorkspaceGroupBuilder(
            task=task,
            language=language,
            settings=settings,
            group_size=group_size,
            evaluation=evaluation,
            episode_env=episode_env,
        )
        for task in tasks
        for language in languages
    ]


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

    def get_batch(self, step: int) -> Sequence[EnvGroupBuilder]:
        if not self.builders:
            return []
        start = (step * self.batch_size + self.offset) % len(self.builders)
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
    """`tasks.family_weights`: every batch mixes the families by weight. Each slot goes to
    a family by the `FamilySchedule`, and takes that family's next group in its own
    cycle. No state: a batch depends only on its step, so a resumed run gets the same
    batches."""

    def __init__(
        self, builders: Sequence[WorkspaceGroupBuilder], weights: dict[str, float], batch_size: int, n_batches: int
    ) -> None:
        self.families = [name for name in dict.fromkeys(builder.task.family for builder in builders)]
        self.groups = {name: [b for b in builders if b.task.family == name] for name in self.families}
        self.schedule = FamilySchedule(self.families, weights)
        self.batch_size = batch_size
        self.n_batches = n_batches

    def get_batch(self, step: int) -> Sequence[EnvGroupBuilder]:
        batch: list[EnvGroupBuilder] = []
        for position in range(self.batch_size):
            family, occurrence = self.schedule.slot(step * self.batch_size + position)
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

    def run_folder(self) -> Path | None:
        """Where the run's records go (none here: kept in memory; a training run's builder
        names its run folder)."""
        return None

    def episode_env(self, config: RunConfig) -> EpisodeEnvFactory:
        """What plays each episode (the reference environment here; a training run's
        builder gives its harness's `training_env`)."""
        return reference_env

    def transcript_stage(self) -> Stage | None:
        """The stage that records the train episodes (none here; a training run's builder,
        piexp.launch.train_transcripts, gives one)."""
        return None

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        ensure_loopback_url(self.sandbox_url)
        config = RunConfig.model_validate_json(self.config_json)
        splits = build_splits(config)
        settings = episode_settings(config, self.sandbox_url)
        assert config.mode.name == "train", "the dataset builder serves training runs"
        folder = self.run_folder()
        log = OutcomeLog(folder / OUTCOMES_FILE if folder is not None else None)
        episode_env = self.episode_env(config)
        sampling, sampler = train_sampling(config, splits, settings, log, episode_env)
        if folder is not None:  # the step metrics of metrics.jsonl come from here
            TrainingControls.register(str(folder), TrainingControls(log, sampler=sampler))
        train_dataset = training_chain(
            config,
            sampling,
            self.sandbox_url,
            log,
            run_dir=folder,
            record_outcomes=folder is not None or sampler is not None,  # someone reads the records
            transcripts=self.transcript_stage(),
        )
        evaluation = group_builders(
            splits.eval, config.eval_languages, settings, 1, evaluation=True, episode_env=episode_env
        )
        return train_dataset, RepeatingDataset(evaluation, len(evaluation), None)


def train_sampling(
    config: RunConfig,
    splits: RunSplits,
    settings: EpisodeSettings,
    log: OutcomeLog,
    episode_env: EpisodeEnvFactory = reference_env,
) -> tuple[RLDataset, OutcomeDrivenDataset | None]:
    """The train dataset the run's `tasks` options choose, and the outcome-driven sampler
    among them (difficulty pools or adaptive difficulty), if any."""
    assert isinstance(config.mode, TrainMode)
    mode, tasks = config.mode, config.tasks

    def groups_of(of: Sequence[Task]) -> list[WorkspaceGroupBuilder]:
        return group_builders(
            of, config.train_languages, settings, mode.group_size, evaluation=False, episode_env=episode_env
        )

    train = groups_of(splits.train)
    if tasks.pools.enabled:  # groups drawn from easy / normal / hard pools by weight
        pools = DifficultyPoolsDataset(train, tasks.pools, mode.groups_per_batch, mode.max_steps, config.seed, log)
        return pools, pools
    if tasks.adaptive.enabled:  # adapted families' groups at their current level
        families = list(dict.fromkeys(builder.task.family for builder in train))
        adaptive = AdaptiveDifficultyDataset(
            FamilySchedule(families, tasks.family_weights or {}),
            mode.groups_per_batch,
            {name: [b for b in train if b.task.family == name] for name in families},
            {
                name: {level: groups_of(of) for level, of in by_level.items()}
                for name, by_level in splits.train_levels.items()
            },
            tasks.adaptive,
            log,
            mode.max_steps,
        )
        return adaptive, adaptive
    if tasks.family_weights is not None:  # families mixed in every batch by weight
        return WeightedFamilyDataset(train, tasks.family_weights, mode.groups_per_batch, mode.max_steps), None
    return RepeatingDataset(train, mode.groups_per_batch, mode.max_steps), None
