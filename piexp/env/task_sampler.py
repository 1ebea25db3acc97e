"""Training datasets whose batches follow the outcomes of the batches before them, and the
per-step metrics of a run's online controls. `OutcomeDrivenDataset` is the common part:
before batch i it takes in, in (step, group) order, the outcomes of every earlier step it
has not seen (on a resume: all of them, read back from `group_outcomes.jsonl`, so the state
rebuilt is the state the uninterrupted run had: saved with every checkpoint, since the
outcomes of the steps before a checkpoint are in the run folder when it is written),
records its state for step i's metrics, then builds the batch; the cookbook's synchronous
loop asks for batch i only once batch i-1 is graded. `DifficultyPoolsDataset` (prime-rl's
pools: `tasks.pools`) and `AdaptiveDifficultyDataset` (`piexp.env.adaptive_difficulty`)
are such datasets. `TrainingControls` is a run's controls in this process, looked up by run
folder when the cookbook logs a step: the step's graded groups, informative fraction and
pass rate, the groups the binary gate dropped, and the sampler's state (pool sizes, levels)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

from tinker_cookbook.rl.types import EnvGroupBuilder, RLDataset

from piexp.config.schema import DifficultyPoolSettings
from piexp.env.episode import WorkspaceGroupBuilder
from piexp.env.group_outcomes import GroupOutcome, OutcomeLog
from piexp.run_records import CONTROLS_PREFIX  # every metric the controls add to a step's row

# The pools of `tasks.pools`, in the order they are listed and drawn from.
POOLS = ("easy", "normal", "hard")


class OutcomeDrivenDataset(RLDataset):
    """A train dataset with state moved by graded groups (`observe`), reported per step
    (`state_metrics`), and batches built from that state (`batch`)."""

    def __init__(self, log: OutcomeLog, n_batches: int) -> None:
        self.log = log
        self.n_batches = n_batches
        self.snapshots: dict[int, dict[str, float]] = {}  # step -> the state its batch was built from
        self._next_step: int | None = None  # the first step whose outcomes are not taken in yet

    def observe(self, outcome: GroupOutcome) -> None:
        raise NotImplementedError

    def state_metrics(self) -> dict[str, float]:
        raise NotImplementedError

    def batch(self, step: int) -> Sequence[EnvGroupBuilder]:
        raise NotImplementedError

    def get_batch(self, step: int) -> Sequence[EnvGroupBuilder]:
        if self._next_step is None:  # the first batch of this process: a fresh run, or a resume
            self.log.resume_at(step)
            self._next_step = 0
        for outcome in self.log.of_steps(self._next_step, step):
            self.observe(outcome)
        self._next_step = max(self._next_step, step)
        self.snapshots[step] = self.state_metrics()
        return self.batch(step)

    def set_epoch(self, seed: int = 0) -> None:
        pass  # batches follow the run's seed and outcomes

    def __len__(self) -> int:
        return self.n_batches


class DifficultyPoolsDataset(OutcomeDrivenDataset):
    """Each (task, language) group is in the easy, normal or hard pool by its latest pass
    rate (normal until graded). A batch draws each slot's pool by weight among the pools
    of positive weight with groups not yet drawn in this batch, then a group of it
    uniformly, seeded by (run seed, step); once every such group is drawn the
    batch starts over. Only when every group sits in pools of weight 0 are those drawn."""

    def __init__(
        self,
        builders: Sequence[WorkspaceGroupBuilder],
        settings: DifficultyPoolSettings,
        batch_size: int,
        n_batches: int,
        seed: int,
        log: OutcomeLog,
    ) -> None:
        super().__init__(log, n_batches)
        self.builders = list(builders)
        self.settings = settings
        self.batch_size = batch_size
        self.seed = seed
        self.weights = {name: float(getattr(settings.weights, name)) for name in POOLS}
        self.pool_of = {(b.task.task_digest, b.language): "normal" for b in self.builders}

    def pool_for(self, pass_rate: float) -> str:
        if pass_rate >= self.settings.easy_at:
            return "easy"
        return "hard" if pass_rate <= self.settings.hard_at else "normal"

    def observe(self, outcome: GroupOutcome) -> None:
        key = (outcome.task_digest, outcome.language)
        if key in self.pool_of:
            self.pool_of[key] = self.pool_for(outcome.pass_rate)

    def members(self) -> dict[str, list[int]]:
        """Each pool's groups (indices into `builders`, in their order)."""
        found: dict[str, list[int]] = {name: [] for name in POOLS}
        for index, builder in enumerate(self.builders):
            found[self.pool_of[(builder.task.task_digest, builder.language)]].append(index)
        return found

    def state_metrics(self) -> dict[str, float]:
        return {f"{CONTROLS_PREFIX}pool/{name}": float(len(ids)) for name, ids in self.members().items()}

    def batch(self, step: int) -> Sequence[EnvGroupBuilder]:
        rng = random.Random(f"{self.seed}:pools:{step}")  # str seeds hash alike in every process
        members = self.members()
        weighted = [name for name in POOLS if members[name] and self.weights[name] > 0]
        drawable = weighted or [name for name in POOLS if members[name]]
        weights = [self.weights[name] if weighted else 1.0 for name in drawable]
        left: dict[str, list[int]] = {}
        chosen: list[EnvGroupBuilder] = []
        for _ in range(self.batch_size if drawable else 0):
            if not any(left.get(name) for name in drawable):
                left = {name: list(members[name]) for name in drawable}
            names = [name for name in drawable if left[name]]
            name = rng.choices(names, [weights[drawable.index(n)] for n in names])[0]
            chosen.append(self.builders[left[name].pop(rng.randrange(len(left[name])))])
        return chosen


class TrainingControls:
    """A training run's online controls in this process, by run folder: the outcome log
    (with the gate's decisions, when it is on) and the sampler (if `tasks.pools` or
    `tasks.adaptive` is on)."""

    _runs: ClassVar[dict[str, TrainingControls]] = {}

    def __init__(self, log: OutcomeLog, *, sampler: OutcomeDrivenDataset | None) -> None:
        self.log = log
        self.sampler = sampler

    @classmethod
    def register(cls, run_dir: str, controls: TrainingControls) -> None:
        cls._runs[run_dir] = controls

    @classmethod
    def of(cls, run_dir: str) -> TrainingControls | None:
        return cls._runs.get(run_dir)

    @classmethod
    def forget(cls, run_dir: str) -> None:
        cls._runs.pop(run_dir, None)

    def step_metrics(self, step: int) -> dict[str, float]:
        """Step `step`'s control metrics: its graded groups, the fraction whose binary
        outcomes differ, their mean pass rate, the groups the gate dropped (the others),
        and the sampler's state its batch was built from."""
        metrics: dict[str, float] = {}
        outcomes = self.log.of_step(step)
        if outcomes:
            informative = sum(outcome.informative for outcome in outcomes)
            metrics[f"{CONTROLS_PREFIX}groups"] = float(len(outcomes))
            metrics[f"{CONTROLS_PREFIX}informative_fraction"] = informative / len(outcomes)
            metrics[f"{CONTROLS_PREFIX}pass_rate"] = sum(o.pass_rate for o in outcomes) / len(outcomes)
            gated = [outcome.dropped for outcome in outcomes if outcome.dropped is not None]
            if gated:  # the gate's own decisions, as recorded
                metrics[f"{CONTROLS_PREFIX}gate_dropped"] = float(sum(gated))
        if self.sampler is not None:
            metrics.update(self.sampler.snapshots.get(step, {}))
        return metrics
