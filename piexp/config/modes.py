"""The run config's `mode` (train, eval or check, each with its own settings) and the task
sampling a training run's controls choose (difficulty pools, adaptive difficulty, the
task counts): parts of `piexp.config.schema.RunConfig`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from piexp.config.base import NonNegativeFloat
from piexp.config.base import StrictSettings as _Strict


Fraction = Annotated[float, Field(ge=0, le=1)]


class PoolWeights(_Strict):
    easy: NonNegativeFloat = Field(description="weight of the easy pool (groups whose latest pass rate was high)")
    normal: NonNegativeFloat = Field(description="weight of the normal pool (and of groups not graded yet)")
    hard: NonNegativeFloat = Field(description="weight of the hard pool (groups whose latest pass rate was low)")


class DifficultyPoolSettings(_Strict):
    """prime-rl's difficulty pools: each (task, language) group sits in the easy, normal or
    hard pool by its latest binary pass rate; batches draw from the pools by weight."""

    enabled: bool = Field(description="sort the train groups into easy / normal / hard pools (mode=train)")
    easy_at: Fraction = Field(description="a group whose latest pass rate is >= this goes to the easy pool")
    hard_at: Fraction = Field(description="a group whose latest pass rate is <= this goes to the hard pool")
    weights: PoolWeights = Field(description="how often each pool is drawn from (an empty pool is skipped)")

    @model_validator(mode="after")
    def _thresholds_ordered(self) -> DifficultyPoolSettings:
        if self.hard_at >= self.easy_at:
            raise ValueError(
                f"tasks.pools.hard_at ({self.hard_at}) must be below tasks.pools.easy_at ({self.easy_at}): "
                "a pass rate cannot be both easy and hard"
            )
        if self.enabled and not (self.weights.easy + self.weights.normal + self.weights.hard) > 0:
            raise ValueError("tasks.pools.weights are all 0: no pool could ever be drawn from")
        return self


class AdaptiveDifficultySettings(_Strict):
    """Each adapted family's difficulty level moves to keep its rolling pass rate in a band."""

    enabled: bool = Field(description="move each adapted family's difficulty level during training (mode=train)")
    families: list[str] | None = Field(description="the families adapted (null = every selected family)")
    band: tuple[Fraction, Fraction] = Field(description="[low, high]: the rolling pass rate a level is kept in")
    start_level: PositiveInt = Field(description="the level every adapted family starts at")
    min_level: PositiveInt = Field(description="the lowest level a family moves down to")
    max_level: PositiveInt | None = Field(description="the highest level a family moves up to (null = its last)")
    window: PositiveInt = Field(description="groups (of the current level) the rolling pass rate is the mean of")
    min_groups_between_moves: PositiveInt = Field(description="groups graded at a level before it may move again")

    @model_validator(mode="after")
    def _band_and_levels_ordered(self) -> AdaptiveDifficultySettings:
        low, high = self.band
        if low >= high:
            raise ValueError(f"tasks.adaptive.band must be [low, high] with low < high, got [{low}, {high}]")
        top = self.max_level if self.max_level is not None else None
        if top is not None and self.min_level > top:
            raise ValueError(f"tasks.adaptive.min_level ({self.min_level}) exceeds tasks.adaptive.max_level ({top})")
        if self.start_level < self.min_level or (top is not None and self.start_level > top):
            raise ValueError(
                f"tasks.adaptive.start_level ({self.start_level}) lies outside "
                f"[min_level, max_level] = [{self.min_level}, {top if top is not None else 'last'}]"
            )
        return self


class TaskCounts(_Strict):
    train_per_family: PositiveInt = Field(description="train tasks generated per family")
    eval_per_family: PositiveInt = Field(description="eval tasks generated per family")
    family_weights: dict[str, PositiveFloat] | None = Field(
        description="mode=train: families mixed in every batch by weight (unnamed ones weigh 1); null = task order"
    )
    pools: DifficultyPoolSettings = Field(description="mode=train: difficulty pools (off by default)")
    adaptive: AdaptiveDifficultySettings = Field(description="mode=train: adaptive difficulty (off by default)")


class TrainMode(_Strict):
    name: Literal["train"] = Field(description="RL training")
    group_size: PositiveInt = Field(description="episodes per (task, language) group")
    groups_per_batch: PositiveInt = Field(description="groups per training batch")
    max_steps: PositiveInt = Field(description="training batches, exactly")
    eval_every: Annotated[int, Field(ge=0)] = Field(description="evaluate on the eval split every N steps (0 = never)")
    save_every: Annotated[int, Field(ge=0)] = Field(description="save a checkpoint every N steps (0 = never)")
    preflight: bool = Field(description="run mode=check's checks before training")
    wandb_project: str | None = Field(description="log to this Weights & Biases project (null = off)")
    eval_before: bool = Field(
        description="first evaluate the base model (mode=eval policy=model) into <run>/eval_base/"
    )
    eval_after: bool = Field(
        description="then evaluate the final checkpoint into <run>/eval_trained/ (and compare, with eval_before)"
    )


def _wandb_needs_its_package(project: str | None) -> None:
    if project is not None:
        import importlib.util

        if importlib.util.find_spec("wandb") is None:
            raise ValueError("mode.wandb_project needs the wandb package, which is not installed (pip install wandb)")


class EvalMode(_Strict):
    name: Literal["eval"] = Field(description="evaluate a policy on the eval split")
    preflight: bool = Field(description="run the check before evaluating a model")
    max_concurrency: PositiveInt = Field(description="episodes run at once")
    wandb_project: str | None = Field(description="log the results to this Weights & Biases project (null = off)")

    @model_validator(mode="after")
    def _wandb_installed(self) -> EvalMode:
        _wandb_needs_its_package(self.wandb_project)
        return self


class CheckMode(_Strict):
    name: Literal["check"] = Field(description="prove every (family, language) cell solvable")
    oracle_tasks_per_cell: PositiveInt = Field(description="oracle episodes per family x language per split")
    sample_tasks_per_cell: PositiveInt = Field(description="episodes per other scripted policy per cell")
    max_concurrency: PositiveInt = Field(description="episodes run at once")
    wandb_project: str | None = Field(
        description="log the check's results to this Weights & Biases project (null = off)"
    )

    @model_validator(mode="after")
    def _wandb_installed(self) -> CheckMode:
        _wandb_needs_its_package(self.wandb_project)
        return self
