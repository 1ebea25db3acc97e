"""Adaptive difficulty (`tasks.adaptive`): each adapted family (one that declares difficulty
levels) trains at a level that moves to keep its rolling pass rate inside a band. A
family's rolling pass rate is the mean pass rate of its last `window` groups graded at its
current level (groups graded at a level it has left are not counted); once at least
`min_groups_between_moves` groups have been graded there, a rate above the band's high
moves the level up and one below its low moves it down, within [min_level, max_level],
and the count starts again. Families take their slots of a batch by
`tasks.family_weights` (equal weights by default; `WeightedFamilyDataset`'s schedule) and
an adapted family's slot takes its next group among its tasks at its current level: task
i of every level comes from the same seeded stream (`piexp.env.splits.level_train_tasks`,
which also refuses any overlap with the eval split), so a run is reproducible."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tinker_cookbook.rl.types import EnvGroupBuilder

from piexp.config.schema import AdaptiveDifficultySettings
from piexp.env.episode import WorkspaceGroupBuilder
from piexp.env.family_schedule import FamilySchedule
from piexp.env.group_outcomes import GroupOutcome, OutcomeLog
from piexp.env.task_sampler import CONTROLS_PREFIX, OutcomeDrivenDataset


@dataclass
class FamilyLevel:
    """One adapted family's level and the pass rates graded at it since it was reached."""

    level: int
    lowest: int
    highest: int
    rates: deque[float] = field(default_factory=deque)
    graded: int = 0  # groups graded at this level since the family reached it

    @property
    def rolling_pass_rate(self) -> float | None:
        return sum(self.rates) / len(self.rates) if self.rates else None

    def take(self, pass_rate: float, settings: AdaptiveDifficultySettings) -> None:
        """One group graded at the current level; the level moves if the rate left the band."""
        self.rates.append(pass_rate)
        while len(self.rates) > settings.window:
            self.rates.popleft()
        self.graded += 1
        rate = self.rolling_pass_rate
        if self.graded < settings.min_groups_between_moves or rate is None:
            return
        low, high = settings.band
        step = 1 if rate > high and self.level < self.highest else -1 if rate < low and self.level > self.lowest else 0
        if step:
            self.level += step
            self.rates.clear()
            self.graded = 0


class AdaptiveDifficultyDataset(OutcomeDrivenDataset):
    """Batches by the family schedule; an adapted family's groups come from its current level."""

    def __init__(
        self,
        schedule: FamilySchedule,
        batch_size: int,
        base_groups: Mapping[str, Sequence[WorkspaceGroupBuilder]],
        level_groups: Mapping[str, Mapping[int, Sequence[WorkspaceGroupBuilder]]],
        settings: AdaptiveDifficultySettings,
        log: OutcomeLog,
        n_batches: int,
    ) -> None:
        super().__init__(log, n_batches)
        self.schedule = schedule
        self.batch_size = batch_size
        self.base_groups = base_groups
        self.level_groups = level_groups
        self.settings = settings
        self.levels = {
            name: FamilyLevel(
                level=settings.start_level,
                lowest=settings.min_level,
                highest=settings.max_level if settings.max_level is not None else max(by_level),
            )
            for name, by_level in level_groups.items()
        }
        # (task digest, language) -> the level its task was made at
        self.level_of = {
            (builder.task.task_digest, builder.language): level
            for by_level in level_groups.values()
            for level, builders in by_level.items()
            for builder in builders
        }

    def observe(self, outcome: GroupOutcome) -> None:
        state = self.levels.get(outcome.family)
        if state is not None and self.level_of.get((outcome.task_digest, outcome.language)) == state.level:
            state.take(outcome.pass_rate, self.settings)

    def state_metrics(self) -> dict[str, float]:
        metrics = {f"{CONTROLS_PREFIX}level/{name}": float(state.level) for name, state in self.levels.items()}
        for name, state in self.levels.items():
            if (rate := state.rolling_pass_rate) is not None:
                metrics[f"{CONTROLS_PREFIX}level_pass_rate/{name}"] = rate
        return metrics

    def batch(self, step: int) -> Sequence[EnvGroupBuilder]:
        chosen: list[EnvGroupBuilder] = []
        size = self.batch_size
        for position in range(size):
            family_index, occurrence = self.schedule.slot(step * size + position)
            name = self.schedule.families[family_index]
            state = self.levels.get(name)
            groups = self.level_groups[name][state.level] if state is not None else self.base_groups[name]
            chosen.append(groups[occurrence % len(groups)])
        return chosen
