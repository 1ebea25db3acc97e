"""The typed `algo` block of a run: every option of tinker-cookbook's RL loop
(`rl.train.Config`) and of its rollout policy (`rl.rollout_presets.RolloutConfig`) that
piexp lets a config set, under the cookbook's names, bounded up front (the values,
the cookbook's defaults, are conf/algo/default.yaml's).
`piexp/launch/train.py` and `piexp/env/rollout_policy.py` turn it into the cookbook's own
objects.

Why not the cookbook's own types: they are `chz` classes, with no bounds and no
descriptions, and several of their fields hold objects (a dataset builder, a rollout
strategy) that a config cannot name. The block here is what a run line can set, each
field bounded and described (the configuration reference is generated from these
descriptions, and a bad value is one paragraph before anything runs); the mapping back is
checked: tests/launch/test_rl_options.py fails on a field of `rl.train.Config` that no
option reaches and `piexp.launch.train.PIEXP_SET_FIELDS` does not explain."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from piexp.config.base import NonNegativeFloat, StrictSettings

NonNegativeInt = Annotated[int, Field(ge=0)]
# tinker's LossFnType minus cross_entropy (supervised) and custom (needs code, not config).
RL_LOSS_FNS = ("importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce")
# tinker_cookbook.rl.types.StopReason values a trajectory can be cut off by (its limits).
LIMIT_STOP_REASONS = ("max_tokens", "max_sampled_tokens", "max_turns", "max_tool_calls", "rollout_timeout")


class LossFnConfig(StrictSettings):
    """The loss function's ratio clipping (ppo, cispo, gspo); null = the service's default."""

    clip_low_threshold: Annotated[float, Field(gt=0, le=1)] | None = Field(
        description="lower clip of the ratio p/q (PPO: 1 - eps_low)"
    )
    clip_high_threshold: Annotated[float, Field(ge=1)] | None = Field(
        description="upper clip of the ratio p/q (PPO: 1 + eps_high)"
    )

    def as_dict(self) -> dict[str, float] | None:
        values = {key: value for key, value in self.model_dump().items() if value is not None}
        return values or None


class KLReference(StrictSettings):
    """The policy the KL penalty is measured against (used when kl_penalty_coef > 0)."""

    base_model: str | None = Field(
        description="base weights of the reference; null = model.name (the trained model's base)"
    )
    load_checkpoint_path: str | None = Field(
        description="tinker:// weights to load into the reference; null = base weights"
    )

    @property
    def is_set(self) -> bool:
        return self.base_model is not None or self.load_checkpoint_path is not None

    @model_validator(mode="after")
    def _tinker_path(self) -> KLReference:
        if self.load_checkpoint_path is not None and not self.load_checkpoint_path.startswith("tinker://"):
            raise ValueError(
                f"algo.kl_reference_config.load_checkpoint_path must be a tinker:// path, "
                f"got {self.load_checkpoint_path!r}"
            )
        return self


class RolloutErrorTolerance(StrictSettings):
    """What a failing rollout (sandbox flake, sampling error) does to its group."""

    # model_default: the cookbook's choice for the model (FailFast, MinViableGroup for Inkling);
    # fail_fast: any error stops training; retry: RetryOnFailure; min_viable_group: MinViableGroup.
    strategy: Literal["model_default", "fail_fast", "retry", "min_viable_group"] = Field(
        description="how a failing rollout is handled"
    )
    max_retries: NonNegativeInt = Field(description="retry / min_viable_group: retries per group, in all")
    per_rollout_timeout: PositiveFloat | None = Field(
        description="retry / min_viable_group: seconds before a rollout is retried; null = none"
    )
    min_successful: PositiveInt | None = Field(
        description="min_viable_group: trajectories a group keeps at least; null = 75% of the group"
    )


class TerminationPolicy(StrictSettings):
    """Reward semantics by stop reason (the cookbook's TerminationRewardPolicy)."""

    enabled: bool = Field(description="false = the model's default (none, except agentic() for Inkling models)")
    zero_reward_on_limit: bool = Field(description="clamp the reward of limit-stopped trajectories to min(reward, 0)")
    limit_stop_reasons: Annotated[list[Literal[LIMIT_STOP_REASONS]], Field(min_length=1)] = Field(  # type: ignore[valid-type]
        description="stop reasons that count as limits"
    )
    skip_grading_on_timeout: bool = Field(
        description="do not grade rollout_timeout trajectories (reward 0) when clamping"
    )
    grader_timeout_seconds: PositiveFloat | None = Field(description="bound on one grading call; null = none")
    pass_all_messages_to_grader: bool = Field(
        description="the grader sees the prompt too (false: only the rollout's messages)"
    )


class ParseErrors(StrictSettings):
    """What a malformed model turn (unparsable tool call) does (the cookbook's ParseErrorPolicy)."""

    enabled: bool = Field(
        description="false = the model's default (one-shot: reward -0.1 and the episode ends; Inkling: agentic())"
    )
    max_consecutive: NonNegativeInt = Field(
        description="content parse failures in a row answered with a corrective message"
    )
    retry_message_template: str = Field(description="that message; {details} = the error")
    penalty_per_error: NonNegativeFloat = Field(description="reward of a retried malformed turn is -penalty_per_error")
    terminal_reward: float = Field(description="reward of the turn that ends the episode on a parse error")
    mask_error_turns: bool = Field(description="leave malformed turns out of the loss")

    @model_validator(mode="after")
    def _placeholder(self) -> ParseErrors:
        if "{details}" not in self.retry_message_template:
            raise ValueError("algo.parse_errors.retry_message_template must contain {details}")
        return self


class AsyncSettings(StrictSettings):
    """Off-policy (asynchronous) training; its batch size is mode.groups_per_batch."""

    max_steps_off_policy: PositiveInt | None = Field(
        description="train on samples at most this many steps old; null = synchronous"
    )


class StreamMinibatchSettings(StrictSettings):
    """Synchronous training that starts on minibatches as their groups finish."""

    num_minibatches: PositiveInt | None = Field(description="forward_backward passes per optimizer substep; null = off")


class AlgoSettings(StrictSettings):
    """The RL recipe (a conf/algo preset plus algo.NAME=VALUE overrides); every preset
    builds on conf/algo/default.yaml, which sets every field."""

    recipe: str = Field(description="the preset's name, recorded with the run")
    loss_fn: Literal[RL_LOSS_FNS] = Field(description="tinker policy-gradient loss")  # type: ignore[valid-type]
    loss_fn_config: LossFnConfig = Field(description="the loss's clip thresholds")
    num_substeps: PositiveInt = Field(description="optimizer steps per training batch")
    kl_penalty_coef: NonNegativeFloat = Field(
        description="weight of the KL penalty against the reference policy (0 = off)"
    )
    kl_discount_factor: Annotated[float, Field(ge=0, le=1)] = Field(
        description="position discount of the KL penalty terms"
    )
    kl_reference_config: KLReference = Field(description="the KL reference policy")
    compute_post_kl: bool = Field(description="log the KL between the sampling and the updated policy (extra cost)")
    remove_constant_reward_groups: bool = Field(description="drop groups whose rewards are all equal (no signal)")
    binary_gate: bool = Field(
        description="drop a group whose binary outcomes are all equal, whatever its shaped rewards"
    )
    shuffle_rewards: bool = Field(
        description="control: permute total rewards within each group before advantages (a run that must NOT learn)"
    )
    rollout_error_tolerance: RolloutErrorTolerance = Field(description="failing rollouts")
    infrastructure_errors: Literal["retry", "mask", "penalize"] = Field(
        description="an episode whose program could not run for the sandbox's reasons: re-rolled (retry), "
        "left out of its group (mask), or given reward.weights.infrastructure_error (penalize, the reference's)"
    )
    termination: TerminationPolicy = Field(description="rewards of limit-stopped trajectories")
    parse_errors: ParseErrors = Field(description="malformed tool calls")
    tool_execution: Literal["parallel", "sequential"] | None = Field(
        description="a turn's tool calls; null = the model's default"
    )
    async_config: AsyncSettings = Field(description="off-policy training")
    stream_minibatch_config: StreamMinibatchSettings = Field(description="streaming minibatches")
    rolling_save_every: NonNegativeInt = Field(
        description="save resumable state (no sampler export) every N steps (0 = never)"
    )
    ttl_seconds: PositiveInt | None = Field(description="periodic checkpoints expire after this; null = never")
    rolling_ttl_seconds: PositiveInt = Field(description="rolling checkpoints expire after this")
    num_groups_to_log: NonNegativeInt = Field(description="groups whose rollouts are logged per step (0 = none)")
    rollout_json_export: bool = Field(description="write each step's rollouts as JSON lines into the run folder")
    enable_trace: bool = Field(description="write async trace events (debugging, profiling)")
    span_chart_every: NonNegativeInt = Field(description="write a Gantt chart every N steps (0 = never; needs plotly)")

    @model_validator(mode="after")
    def _consistent(self) -> AlgoSettings:
        if (
            self.async_config.max_steps_off_policy is not None
            and self.stream_minibatch_config.num_minibatches is not None
        ):
            raise ValueError("algo.async_config and algo.stream_minibatch_config exclude each other (set one)")
        if self.kl_penalty_coef == 0 and self.kl_reference_config.is_set:
            raise ValueError("algo.kl_reference_config is only used with algo.kl_penalty_coef > 0")
        if self.shuffle_rewards and self.termination.zero_reward_on_limit:
            raise ValueError(
                "algo.shuffle_rewards cannot be combined with algo.termination.zero_reward_on_limit: the "
                "clamp, applied after the shuffle by each episode's own stop reason, would leak a signal"
            )
        tolerance = self.rollout_error_tolerance
        if tolerance.min_successful is not None and tolerance.strategy != "min_viable_group":
            raise ValueError("algo.rollout_error_tolerance.min_successful is only used with strategy=min_viable_group")
        if self.infrastructure_errors != "penalize" and tolerance.strategy == "fail_fast":
            raise ValueError(
                f"algo.infrastructure_errors={self.infrastructure_errors} needs a rollout strategy that survives a "
                "failed episode; algo.rollout_error_tolerance.strategy=fail_fast would stop the run at the first "
                "one (use model_default, or algo.infrastructure_errors=penalize)"
            )
        if self.loss_fn_config.as_dict() and self.loss_fn not in ("ppo", "cispo", "gspo"):
            raise ValueError(
                f"algo.loss_fn_config (clip thresholds) is only used by ppo, cispo and gspo, "
                f"not algo.loss_fn={self.loss_fn}"
            )
        if self.span_chart_every:
            import importlib.util

            if importlib.util.find_spec("plotly") is None:
                raise ValueError("algo.span_chart_every needs plotly, which is not installed (pip install plotly)")
        return self
