"""The typed run configuration: every composed Hydra config becomes one `RunConfig`
before anything runs, so a bad value is refused up front with a clear message."""

from __future__ import annotations

# The run config's parts, imported from here by name: their home is the module each is
# defined in.
__all__ = [
    "AdaptiveDifficultySettings", "CheckMode", "DifficultyPoolSettings", "EmbeddedSandboxSettings", "EvalMode",
    "Fraction", "LanguageSettings", "Limits", "LocalService", "ModelSettings", "PoolWeights", "RemoteSandboxSettings",
    "RewardSettings", "RewardWeights", "RunConfig", "SandboxSettings", "SelfhostedService", "ServiceSettings",
    "TaskCounts", "TinkerService", "TrainMode", "WarmStartSettings", "HarnessSettings", "LocalRollouts",
    "RayRollouts", "RolloutSettings",
]  # fmt: skip

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt, field_validator, model_validator

from piexp.config.algo import AlgoSettings
from piexp.config.backends import (
    EmbeddedSandboxSettings,
    LocalService,
    RemoteSandboxSettings,
    SandboxSettings,
    SelfhostedService,
    ServiceSettings,
    TinkerService,
)
from piexp.config.base import NonNegativeFloat
from piexp.config.base import StrictSettings as _Strict
from piexp.config.capabilities import refuse_unsupported_algo
from piexp.config.defaults import default_settings
from piexp.config.episode_settings import LanguageSettings, Limits, RewardSettings, RewardWeights
from piexp.config.rollouts import LocalRollouts, RayRollouts, RolloutSettings
from piexp.config.modes import (
    AdaptiveDifficultySettings,
    CheckMode,
    DifficultyPoolSettings,
    EvalMode,
    Fraction,
    PoolWeights,
    TaskCounts,
    TrainMode,
)
from piexp.languages import LANGUAGES

OFFLINE_POLICIES = ("oracle", "guess", "crash", "wrong", "edit")
EVAL_POLICIES = (*OFFLINE_POLICIES, "model")
# The scripted policy that states a number without using a tool was called `null`, which
# Hydra reads as "no value" (the model policy) inside sweep lists and presets.
RENAMED_POLICY_HINT = (
    "the scripted policy that answers without tools is now called `guess` (policy=guess); "
    "`null` is refused because Hydra reads it as no value, which selects the model policy"
)


class ModelSettings(_Strict):
    name: Annotated[str, Field(min_length=1)] = Field(description="the base model (Tinker model id, or a local one)")
    renderer: str | None = Field(description="tinker-cookbook renderer (null = the cookbook's choice for the model)")
    lora_rank: PositiveInt = Field(description="LoRA rank of the trained adapter")
    learning_rate: PositiveFloat = Field(description="Adam learning rate")
    temperature: NonNegativeFloat = Field(description="sampling temperature")


class WarmStartSettings(_Strict):
    """Supervised steps on scripted-policy trajectories before RL (0 = off)."""

    sft_steps: Annotated[int, Field(ge=0)] = Field(description="supervised steps before RL (0 = no warm start)")
    policy: Literal["oracle"] = Field(description="the scripted policy whose trajectories are imitated")
    tasks: PositiveInt = Field(description="train tasks rolled out (one episode each) to make the SFT data")
    learning_rate: PositiveFloat | None = Field(description="null = model.learning_rate")


class HarnessSettings(_Strict):
    """Which agent plays each episode (conf/harness/): the class its YAML's `_target_`
    names (checked when a run starts, piexp.harness) and that class's own options."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    target: str = Field(alias="_target_", description="the harness's class, an import path (package.module.Class)")
    name: Annotated[str, Field(min_length=1)] = Field(description="the harness's name (builtin, pi, ...)")
    options: dict[str, Any] = Field(description="the harness's own settings, validated by its class (docs/harness.md)")

    @field_validator("target")
    @classmethod
    def _an_import_path(cls, target: str) -> str:
        parts = target.replace(":", ".").split(".")
        if len(parts) < 2 or not all(part.isidentifier() for part in parts):
            raise ValueError(f"harness._target_ {target!r} is not an import path like package.module.Class")
        return target


class RunConfig(_Strict):
    """The values, and their comments, live in the YAML under conf/: every field that all
    of a group's options set is required here (a composed config that lacks one is
    refused), so no value is written twice. Only fields some YAML leaves out on purpose
    (the languages' derived ids) have a default, None. `mode`, `service` and `sandbox`
    are tagged unions: each option of the group has its own settings class."""

    family: dict[str, dict[str, Any]] = Field(description="the task families and their difficulty params")
    languages: dict[str, LanguageSettings] = Field(description="per-language runtime table")
    lang: list[str] = Field(description="train language schedule, cycled in order")
    eval_lang: list[str] | None = Field(description="languages of the eval split (null = lang)")
    seed: int = Field(description="master seed of task generation, dataset order and sampling")
    tasks: TaskCounts = Field(description="tasks generated per family and split")
    policy: str | None = Field(description="eval policy (null = model)")
    k: PositiveInt | None = Field(description="samples per eval task (null = 1)")
    checkpoint: str | None = Field(description="eval: a tinker:// sampler path or a training run folder")
    # A record, not a setting.
    reproduces: str | None = Field(description="the run folder this run reproduces (set by `piexp reproduce`)")
    reward: RewardSettings = Field(description="reward mode and weights used for training")
    limits: Limits = Field(description="episode and sandbox limits")
    model: ModelSettings = Field(description="sampled/trained model, renderer, LoRA rank, learning rate")
    service: ServiceSettings = Field(description="where training and model sampling run")
    warm_start: WarmStartSettings = Field(description="supervised steps on scripted trajectories before RL")
    sandbox: SandboxSettings = Field(description="where programs run")
    harness: HarnessSettings = Field(
        description="the agent that plays each episode (builtin: the reference environment)"
    )
    rollouts: RolloutSettings = Field(description="where episodes are played: this process, or a Ray cluster's nodes")
    algo: AlgoSettings = Field(description="RL recipe (mode=train)")
    mode: Annotated[TrainMode | EvalMode | CheckMode, Field(discriminator="name")] = Field(
        description="train | eval | check, with the mode's settings"
    )

    @field_validator("languages")
    @classmethod
    def _sandbox_ids_from_the_registry(cls, languages: dict[str, LanguageSettings]) -> dict[str, LanguageSettings]:
        # Filled in, so that a config saved when the YAML still spelled the id out and one
        # that omits it are the same run (one config hash; `reproduce` finds no difference).
        # A differing id is kept for check_configured_languages to refuse.
        return {
            name: settings.model_copy(update={"sandbox_language": LANGUAGES[name].sandbox_id})
            if settings.sandbox_language is None and name in LANGUAGES
            else settings
            for name, settings in languages.items()
        }

    @field_validator("family", mode="before")
    @classmethod
    def _params_of_families_not_selected(cls, family: Any) -> Any:
        # A preset's params for a known family the run does not select (no `_target_`:
        # `experiment=learn_offline family=json_tree` keeps the preset's csv_agg params) are
        # not used by the run, so they are left out; an unknown name stays, to be refused.
        from piexp.tasks import TARGET_KEY
        from piexp.tasks.registry import known_names

        if not isinstance(family, dict):
            return family
        known = set(known_names())
        return {
            name: entry
            for name, entry in family.items()
            if not (isinstance(entry, dict) and TARGET_KEY not in entry and name in known)
        }

    @field_validator("lang", "eval_lang", mode="before")
    @classmethod
    def _one_language_is_a_list(cls, value: Any) -> Any:
        # `lang=python` on the command line is a one-language schedule.
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        from piexp.tasks import TARGET_KEY
        from piexp.tasks.registry import activate, known_names

        from piexp.config.suggest import did_you_mean_aside

        if not self.family:
            raise ValueError(f"no task family selected; choose from: {', '.join(known_names())}")
        unknown = sorted(name for name, entry in self.family.items() if TARGET_KEY not in entry)
        if unknown:
            raise ValueError(
                f"unknown task famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}"
                f"{did_you_mean_aside(unknown[0], known_names())}; valid families: {', '.join(known_names())} "
                f"(a family's YAML entry must name its code with {TARGET_KEY}, see docs/families.md)"
            )
        # Each family's code is imported and its params range-checked now, not when the run
        # builds its tasks: nothing is written first.
        families = activate(self.family)
        if not self.lang:
            raise ValueError("lang is empty; give at least one language")
        for key, names in (("lang", self.lang), ("eval_lang", self.eval_lang or [])):
            unknown = [name for name in names if name not in self.languages]
            if unknown:
                raise ValueError(
                    f"unknown language {', '.join(unknown)} in {key}"
                    f"{did_you_mean_aside(unknown[0], self.languages)}; "
                    f"valid languages: {', '.join(self.languages)}"
                )
        self._refuse_languages_without_references({name: family for name, (family, _) in families.items()})
        if self.eval_lang is not None and not self.eval_lang:
            raise ValueError("eval_lang is empty; give at least one language or leave it unset")
        if isinstance(self.mode, TrainMode):
            # k also sets the samples per task of the loop's evaluations (mode.eval_before/after).
            loop_evals = self.mode.eval_before or self.mode.eval_after
            eval_only = [key for key in ("policy", "k", "checkpoint")
                         if getattr(self, key) is not None and not (key == "k" and loop_evals)]  # fmt: skip
            if eval_only:
                raise ValueError(
                    f"{', '.join(eval_only)} {'is an eval-only option' if len(eval_only) == 1 else 'are eval-only options'}"
                    " and cannot be used with mode=train (use mode=eval"
                    + ("; k also sets the samples of mode.eval_before/eval_after)" if "k" in eval_only else ")")
                )
        if self.model.name in ("tiny-local", "learner-local", "learner-local-pi") and self.service.name == "tinker":
            raise ValueError(f"model={self.model.name} is a local model folder; use it with service=local")
        self._refuse_what_the_mode_ignores()
        if self.mode.name == "train":
            self._check_algo_fits_training(self.mode)
        if self.policy == "null":
            raise ValueError(RENAMED_POLICY_HINT)
        if self.policy is not None and self.policy not in EVAL_POLICIES:
            from piexp.config.suggest import did_you_mean

            raise ValueError(
                f"unknown policy {self.policy!r}.{did_you_mean(self.policy, EVAL_POLICIES)} "
                f"Valid policies: {', '.join(EVAL_POLICIES)}"
            )
        if self.checkpoint is not None:
            from piexp.checkpoint_source import resolve_checkpoint

            resolve_checkpoint(self.checkpoint)  # a tinker:// path, or a run folder with one
        if self.checkpoint is not None and self.eval_policy != "model":
            raise ValueError("checkpoint is only used with policy=model")
        return self

    @property
    def needs_references(self) -> bool:
        """Whether the run plays reference programs: the check (or a preflight), the
        oracle or edit policy, or a warm start imitating the oracle."""
        mode = self.mode
        if mode.name == "check" or getattr(mode, "preflight", False) or self.warm_start.sft_steps > 0:
            return True
        return mode.name == "eval" and self.eval_policy in ("oracle", "edit")

    def _refuse_languages_without_references(self, families: dict[str, Any]) -> None:
        """A family with references in some languages runs only in those; one with none
        at all (a task file without references) only in runs that never play them."""
        asked = list(dict.fromkeys([*self.lang, *(self.eval_lang or [])]))
        for name, family in families.items():
            if getattr(family, "graded_by_verifier", False):
                continue  # each task's oracle is its own solution/solve.sh (an imported Harbor task)
            has = family.reference_languages()
            missing = [language for language in asked if language not in has]
            if missing and not has and self.needs_references:
                raise ValueError(self._no_references_at_all(name, family.source_file))
            if missing and has:
                raise ValueError(
                    f"family {name} has no reference program in {', '.join(missing)} (it has "
                    f"{', '.join(has) or 'none'}; {family.source_file}), so the run cannot prove its tasks "
                    f"solvable there: drop {', '.join(missing)} from lang/eval_lang, or add the reference"
                    + (f" as {name}.<ext> in {family.refs_dir}" if hasattr(family, "refs_dir") else "")
                )

    def _no_references_at_all(self, name: str, source: Any) -> str:
        """Why a run that plays references cannot take a family with none (a task file
        without `references`), and the setting that lets it run without them."""
        mode = self.mode
        elsewhere = "run mode=eval policy=model mode.preflight=false (or mode=train mode.preflight=false)"
        if mode.name == "check":
            why, fix = "mode=check proves each task solvable by its reference", elsewhere
        elif self.warm_start.sft_steps > 0:
            why, fix = "warm_start.sft_steps imitates the oracle's references", "set warm_start.sft_steps=0"
        elif mode.name == "eval" and self.eval_policy in ("oracle", "edit"):
            why, fix = f"policy={self.eval_policy} plays the references", elsewhere
        else:
            why, fix = f"mode.preflight runs mode=check's checks before the {mode.name}", "add mode.preflight=false"
        if fix != elsewhere and getattr(mode, "preflight", False) and "preflight" not in fix:
            fix += " and mode.preflight=false"
        return (
            f"family {name} has no reference program in any language ({source}: its tasks have no "
            f"`references`), and {why}, so this run cannot take it. A model is evaluated or trained on it "
            f"without references: {fix}; or add references to its tasks (a `references` field: language -> program)"
        )

    def _refuse_what_the_mode_ignores(self) -> None:
        """A setting the selected mode would silently ignore is refused, in every direction:
        training options outside mode=train, policy options in mode=check (it runs its own
        scripted policies); eval-only options in mode=train are refused above."""
        if self.mode.name == "train":
            return
        ignored = []
        if self.warm_start.sft_steps:
            ignored.append("warm_start.sft_steps")
        default_algo = default_settings("algo", AlgoSettings)
        if self.algo != default_algo:
            changed = [
                key for key in type(self.algo).model_fields if getattr(self.algo, key) != getattr(default_algo, key)
            ]
            ignored.append("algo (" + ", ".join(f"algo.{key}" for key in changed) + ")")
        if self.tasks.family_weights is not None:
            ignored.append("tasks.family_weights")
        ignored += [f"tasks.{name}" for name in ("pools", "adaptive") if getattr(self.tasks, name).enabled]
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)} {'is a training option' if len(ignored) == 1 else 'are training options'}"
                f" (mode=train) that mode={self.mode.name} would ignore; drop it or use mode=train"
            )
        if self.mode.name == "check":
            policy_options = [key for key in ("policy", "k", "checkpoint") if getattr(self, key) is not None]
            if policy_options:
                raise ValueError(
                    f"{', '.join(policy_options)} would be ignored by mode=check (it runs the oracle and "
                    "the other scripted policies itself); use mode=eval to evaluate a policy"
                )

    def _check_algo_fits_training(self, mode: TrainMode) -> None:
        """Batch arithmetic the cookbook asserts mid-run, and what the service can honour."""
        algo = self.algo
        minibatches = algo.stream_minibatch_config.num_minibatches
        if minibatches is not None and mode.groups_per_batch % (algo.num_substeps * minibatches):
            raise ValueError(
                f"algo.stream_minibatch_config needs mode.groups_per_batch ({mode.groups_per_batch}) to be a "
                f"multiple of algo.num_substeps x algo.stream_minibatch_config.num_minibatches "
                f"({algo.num_substeps} x {minibatches})"
            )
        floor = algo.rollout_error_tolerance.min_successful
        if floor is not None and floor > mode.group_size:
            raise ValueError(
                f"algo.rollout_error_tolerance.min_successful ({floor}) exceeds mode.group_size ({mode.group_size})"
            )
        if algo.binary_gate and mode.group_size < 2:
            raise ValueError(
                "algo.binary_gate needs mode.group_size >= 2: a group of one episode has one outcome, so every "
                "group would be dropped"
            )
        weights = self.tasks.family_weights or {}
        unknown = sorted(set(weights) - set(self.family))
        if unknown:
            raise ValueError(
                f"tasks.family_weights names {', '.join(unknown)}, not among the selected families "
                f"({', '.join(self.family)}); weigh only families in family="
            )
        self._check_task_sampler()
        refuse_unsupported_algo(self.service.name, algo, self.model.name)

    def _check_task_sampler(self) -> None:
        """Difficulty pools and adaptive difficulty: their state at a batch must follow from
        the outcomes of the batches before it (so a resume rebuilds it), and adaptation
        needs families whose difficulty is declared, within their levels."""
        pools, adaptive = self.tasks.pools, self.tasks.adaptive
        if not (pools.enabled or adaptive.enabled):
            return
        chosen = " and ".join(f"tasks.{name}" for name in ("pools", "adaptive") if getattr(self.tasks, name).enabled)
        if pools.enabled and adaptive.enabled:
            raise ValueError(
                "tasks.pools and tasks.adaptive cannot be combined: pools sort fixed tasks by their pass rate, while "
                "adaptive difficulty replaces a family's tasks when its level moves; enable one of them"
            )
        if self.tasks.family_weights is not None and pools.enabled:
            raise ValueError(
                "tasks.pools and tasks.family_weights cannot be combined: the pools' weights decide what a batch "
                "holds; drop one of them"
            )
        if self.algo.async_config.max_steps_off_policy is not None:
            raise ValueError(
                f"{chosen} needs synchronous training (algo.async_config.max_steps_off_policy=null): its state at a "
                "batch is built from the outcomes of every batch before it, which async training has not finished"
            )
        if adaptive.enabled:
            self._check_adaptive(adaptive)

    def _check_adaptive(self, adaptive: AdaptiveDifficultySettings) -> None:
        from piexp.tasks.registry import get_family

        names = adaptive.families if adaptive.families is not None else list(self.family)
        unknown = sorted(set(names) - set(self.family))
        if unknown:
            raise ValueError(
                f"tasks.adaptive.families names {', '.join(unknown)}, not among the selected families "
                f"({', '.join(self.family)}); adapt only families in family="
            )
        if not names:
            raise ValueError("tasks.adaptive.families is empty; name a family to adapt, or null for all")
        for name in names:
            difficulty = getattr(get_family(name), "difficulty", None)
            if difficulty is None:
                raise ValueError(
                    f"tasks.adaptive cannot adapt family {name}: it declares no difficulty levels (only a generated "
                    "family with Family(difficulty=...) can make tasks at another level; docs/frontier.md); leave it "
                    "out of tasks.adaptive.families"
                )
            top = adaptive.max_level if adaptive.max_level is not None else difficulty.count
            if top > difficulty.count or adaptive.start_level > difficulty.count:
                raise ValueError(
                    f"tasks.adaptive: family {name} has difficulty levels 1..{difficulty.count}, but "
                    f"start_level={adaptive.start_level} and max_level={adaptive.max_level} ask for more"
                )

    @property
    def families(self) -> list[str]:
        return list(self.family)

    @property
    def eval_languages(self) -> list[str]:
        return list(self.eval_lang) if self.eval_lang is not None else list(dict.fromkeys(self.lang))

    @property
    def train_languages(self) -> list[str]:
        return list(self.lang)

    @property
    def eval_policy(self) -> str:
        return self.policy or "model"

    @property
    def uses_service(self) -> bool:
        """Whether the run trains or samples through the training service."""
        return self.mode.name == "train" or (self.mode.name == "eval" and self.eval_policy == "model")

    @property
    def samples_per_task(self) -> int:
        return self.k or 1
