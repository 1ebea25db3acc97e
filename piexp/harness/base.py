"""What a harness is: the agent that plays an episode (docs/harness.md).

A harness is chosen like a task family: `conf/harness/NAME.yaml` names its class with
`_target_`, and that class, a subclass of `Harness`, is built from the run's
`HarnessSettings` (its own `options` included). `mode=check` and `mode=eval` hand every
episode to `Harness.play`, which has the signature of `piexp.policies.rollout.run_episode`
and returns the same `EpisodeRecord` (rewards, the reward metrics of piexp.env.reward,
stop reason, transcript), so episodes of every harness are stored, shown, summarized and
compared alike. A failure of the harness's own machinery (its process crashed or hung,
its model endpoint died, the sandbox failed) is a record with `infrastructure_failure`
set: played again, never scored.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from piexp.config.schema import HarnessSettings, LanguageSettings, RewardSettings, RunConfig
from piexp.errors import UserError
from piexp.run_folder import harness_identity

if TYPE_CHECKING:
    # Types only: choosing and checking a harness (before a run's folder is made, and on
    # `--cfg` and validation paths) does not import the RL stack (torch, the cookbook).
    from tinker_cookbook.completers import TokenCompleter
    from tinker_cookbook.renderers import Renderer
    from tinker_cookbook.rl.types import Env

    from piexp.env.episode import EpisodeSettings
    from piexp.policies.rollout import EpisodeRecord
    from piexp.tasks import Task


class Harness(ABC):
    """One run's harness. Subclasses set `name` and implement `play`; a harness that
    needs something installed or started says so in `refuse_unusable` (before anything
    of the run is written) and releases what it started in `aclose`."""

    name: ClassVar[str] = ""
    # Whether `mode=train` can train in this harness (its episodes become the RL loop's
    # trajectories); a harness that cannot is refused for training, not silently swapped.
    trains: ClassVar[bool] = False
    # Whether `replay` can play its recorded turns again: it plays each recorded episode
    # through `play` with the recorded turns as the model's tokens, and compares the new
    # transcript's conversation with the recorded one (so a harness whose transcripts
    # record the model's turns and the tool results in piexp's format can).
    replays: ClassVar[bool] = False
    # Whether a run records this harness: the manifest's `harness` entry and an eval's
    # resume signature. The reference environment's runs do not, so that they stay as
    # runs were before harnesses were configurable (and resume and reproduce alike).
    recorded_in_runs: ClassVar[bool] = True
    # Whether it plays tasks graded by a verifier of their own (imported Harbor tasks:
    # an instruction, a workspace at a working folder, tests/test.sh run after the agent);
    # such a harness implements `prove_verified`. Runs with such tasks in another harness
    # are refused before anything is written.
    plays_verified_tasks: ClassVar[bool] = False

    def __init__(self, settings: HarnessSettings) -> None:
        self.settings = settings

    @classmethod
    def refuse_unusable(cls, settings: HarnessSettings) -> None:
        """Raise a `UserError` naming the fix when this harness cannot run here (not
        installed, bad options). Called when a run starts, before its folder is written."""

    @classmethod
    def refuse_missing_runtimes(cls, settings: HarnessSettings, languages: Mapping[str, LanguageSettings]) -> None:
        """Raise a `UserError` when a runtime the run's languages need is missing where this
        harness runs their programs (`harness=pi`: in its own sandbox, on this machine);
        called before a run's folder is written. The reference environment runs programs
        in the run's sandbox server, whose preflight check reports its runtimes."""

    @classmethod
    def refuse_concurrency(cls, settings: HarnessSettings, concurrency: int) -> None:
        """Raise a `UserError` when `concurrency` episodes at once would exhaust this
        machine (a harness whose episodes are processes of their own says how much each
        holds); called with the run's `mode.max_concurrency` before its folder is written."""

    def manifest(self) -> dict[str, Any]:
        """What the run's manifest records of the harness (versions, config); `reproduce`
        refuses a rerun whose harness records other values."""
        return {"name": self.name, "settings": self.settings.model_dump(mode="json", by_alias=True)}

    @classmethod
    def rescored_reward(cls, transcript: dict[str, Any], answer: str, reward: RewardSettings, *, binary: bool) -> float:
        """A recorded episode's reward under `reward` (binary or shaped), from its transcript
        alone (`rescore`: no sampling, no sandbox). By default from the reward steps the
        harness graded and recorded (`metrics`: the same four steps in every harness), under
        today's `steps_reward`; an episode that ended before grading (no steps recorded,
        or a context overflow) keeps its recorded reward."""
        from piexp.env.reward import steps_reward

        if transcript.get("verifier") is not None:
            return float(transcript["reward"])  # the task's own verifier graded it: not from the transcript
        metrics = transcript.get("metrics")
        if not isinstance(metrics, dict) or not metrics or transcript.get("stop_reason") == "context_overflow":
            return float(transcript["reward"])
        return steps_reward(metrics, reward.weights, binary=binary)

    def progress_label(self, activity: str) -> str:
        """What progress lines call `activity` (a check) played in this harness: named
        after it, so that a run in another harness than the reference one says so."""
        return f"{activity} ({self.name})"

    async def scripted_trajectories(
        self, config: RunConfig, sandbox_url: str, tasks: Sequence[Task], policies: Sequence[str], progress: Any = None
    ) -> tuple[list[Any], list[float]]:
        """Scripted episodes as imitation data: on each task the scripted policy named at
        the same index (cycling through the run's train languages), as trajectories the
        model could have sampled in this harness, with their rewards; `progress.advance()`
        after each. The warm start's data, and a piexp-built base model's. A harness
        whose episodes cannot be played as such data refuses, with the way out named."""
        raise UserError(
            f"imitation data (warm_start.sft_steps, a piexp-built base model) needs scripted episodes played in "
            f"harness={self.name}, which it cannot play as such; set warm_start.sft_steps=0 for it."
        )

    async def warm_start_trajectories(
        self, config: RunConfig, sandbox_url: str, tasks: list[Task]
    ) -> tuple[list[Any], list[float]]:
        """The warm start's imitation data (`warm_start.sft_steps`): `warm_start.policy`'s
        episodes on `tasks` in this harness (`scripted_trajectories`)."""
        return await self.scripted_trajectories(config, sandbox_url, tasks, [config.warm_start.policy] * len(tasks))

    async def prove_verified(self, tasks: Sequence[Task], config: RunConfig) -> list[str]:
        """For each task graded by its own verifier: its oracle and then its verifier must
        give reward 1, its verifier on the untouched workspace reward 0. Returns what is
        wrong, one sentence per task (a harness that `plays_verified_tasks` implements it)."""
        raise NotImplementedError(f"harness {self.name} does not play tasks graded by their own verifier")

    def identity(self) -> dict[str, str]:
        """The harness's name and versions, as results name it (`results.json`'s `harness`)."""
        return harness_identity(self.manifest())

    @abstractmethod
    async def play(
        self,
        policy: TokenCompleter,
        policy_name: str,
        task: Task,
        language: str,
        settings: EpisodeSettings,
        *,
        sample: int = 0,
        record_transcript: bool = True,
    ) -> EpisodeRecord:
        """One evaluation episode; never raises for a failed episode (its record says)."""

    def training_env(
        self, task: Task, language: str, settings: EpisodeSettings, renderer: Renderer, *, evaluation: bool
    ) -> Env:
        """One episode as a tinker-cookbook `Env` the RL loop steps (its observations the
        tokens the model is sampled on, its actions the tokens it sampled, its last step
        the episode's reward): what `mode=train` trains on, and the eval split it
        evaluates during training. A harness that `trains` implements it."""
        raise NotImplementedError(f"harness {self.name} does not train")

    async def aclose(self) -> None:
        """Stop what the harness started for the run."""


# A harness's `rescored_reward`: (transcript, the task's answer, reward settings, binary=) -> reward.
Regrade = Callable[..., float]

_classes: dict[str, type[Harness]] = {}


def harness_class(settings: HarnessSettings) -> type[Harness]:
    """The class `settings.target` names, imported once; a target that does not import
    or is no `Harness` is the user's error."""
    target = settings.target.replace(":", ".")
    if target in _classes:
        return _classes[target]
    module_name, _, attribute = target.rpartition(".")
    where = f"harness {settings.name!r}: _target_ {settings.target}"
    try:
        obj = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise UserError(
            f"{where} does not import ({type(error).__name__}: {error}). Check the spelling "
            "(package.module.Class) and that its package is installed or on PYTHONPATH; piexp's own "
            "harnesses are conf/harness/builtin.yaml and conf/harness/pi.yaml (see docs/harness.md)."
        ) from None
    if not (isinstance(obj, type) and issubclass(obj, Harness)):
        raise UserError(f"{where} is not a piexp.harness.Harness subclass (see docs/harness.md)")
    _classes[target] = obj
    return obj


def make_harness(settings: HarnessSettings) -> Harness:
    """The run's harness, refused with the fix named where it cannot run."""
    cls = harness_class(settings)
    cls.refuse_unusable(settings)
    return cls(settings)


_run_harnesses: dict[str, Harness] = {}  # a training run's harness, by its settings


def run_harness(settings: HarnessSettings) -> Harness:
    """The harness a training run's episodes are played by: one per process and
    settings (its sandbox shared by every episode), until `close_run_harnesses`."""
    key = settings.model_dump_json(by_alias=True)
    if key not in _run_harnesses:
        _run_harnesses[key] = make_harness(settings)
    return _run_harnesses[key]


async def close_run_harnesses() -> None:
    """Stop what the training run's harnesses started (called when the run ends)."""
    while _run_harnesses:
        _key, harness = _run_harnesses.popitem()
        await harness.aclose()


def refuse_unusable_harness(config: RunConfig) -> None:
    """`make_harness`'s checks alone, for a job before its folder is claimed: the harness
    imports and can run here with its options, the runtimes of the run's languages are
    there, the episodes the run plays at once fit the machine (`mode.max_concurrency`),
    and a training run (mode=train) trains in a harness that `trains`."""
    settings = config.harness
    cls = harness_class(settings)
    cls.refuse_unusable(settings)
    languages = dict.fromkeys([*config.train_languages, *config.eval_languages])
    cls.refuse_missing_runtimes(settings, {name: config.languages[name] for name in languages})
    concurrency = getattr(config.mode, "max_concurrency", None)
    if concurrency is not None:
        cls.refuse_concurrency(settings, concurrency)
    if config.mode.name == "train" and not cls.trains:
        raise UserError(
            f"mode=train cannot train in harness={settings.name}: its class ({settings.target}) does not train (its "
            "`trains` is False; a harness trains by implementing `training_env`, docs/harness.md). Train in a "
            f"harness that does (harness=pi or harness=builtin), and evaluate in harness={settings.name} "
            f"(mode=eval harness={settings.name} checkpoint=RUN_FOLDER)."
        )


def harness_manifest(settings: HarnessSettings) -> dict[str, Any] | None:
    """The manifest's `harness` entry of a run (None for a harness that is not
    `recorded_in_runs`: the builtin one, whose runs' manifests stay as they were)."""
    if not harness_class(settings).recorded_in_runs:
        return None
    return make_harness(settings).manifest()


def refuse_another_harness(recorded: Any, settings: HarnessSettings, run_dir: Any, done: str = "reproduced") -> None:
    """`reproduce` and `replay`: refuse a rerun whose harness would be another version than
    the one the run's manifest records (each versioned field, named); `done` is what the
    command would do to the run."""
    if not isinstance(recorded, dict):
        return
    now = harness_manifest(settings) or {"name": settings.name}
    for key, before in recorded.items():
        if key.endswith("_version") and now.get(key) != before:
            raise UserError(
                f"The run in {run_dir} was played by {recorded.get('name')} with {key.removesuffix('_version')} "
                f"{before}; this piexp has {now.get(key)}. It cannot be {done} with another version; use the "
                "piexp (and its lockfile) the run used, and run `make setup`."
            )
