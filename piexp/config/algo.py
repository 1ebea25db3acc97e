"""The typed `algo` block of a run: every option of tinker-cookbook's RL loop
(`rl.train.Config`) and of its rollout policy (`rl.rollout_presets.RolloutConfig`) that
piexp lets a config set, with the cookbook's names and defaults, bounded up front.
`piexp/launch/rl_config.py` turns it into the cookbook's own objects."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

NonNegativeFloat = Annotated[float, Field(ge=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# tinker's LossFnType minus cross_entropy (supervised) and custom (needs code, not config).
RL_LOSS_FNS = ("importance_sampling", "ppo", "cispo", "dro", "gspo", "stable_reinforce")
# tinker_cookbook.rl.types.StopReason values a trajectory can be cut off by (its limits).
LIMIT_STOP_REASONS = ("max_tokens", "max_sampled_tokens", "max_turns", "max_tool_calls", "rollout_timeout")
# rl.train.Config defaults for checkpoint retention (7 days, 2 hours).
DEFAULT_TTL_SECONDS = 604800
DEFAULT_ROLLING_TTL_SECONDS = 7200


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LossFnConfig(_Strict):
    """The loss function's ratio clipping (ppo, cispo, gspo); null = the service's default."""

    clip_low_threshold: Annotated[float, Field(gt=0, le=1)] | None = (
        None  # lower clip of the ratio p/q (PPO: 1 - eps_low)
    )
    clip_high_threshold: Annotated[float, Field(ge=1)] | None = None  # upper clip of the ratio p/q (PPO: 1 + eps_high)

    def as_dict(self) -> dict[str, float] | None:
        values = {key: value for key, value in self.model_dump().items() if value is not None}
        return values or None


class KLReference(_Strict):
    """The policy the KL penalty is measured against (used when kl_penalty_coef > 0)."""

    base_model: str | None = None  # base weights of the reference; null = model.name (the trained model's base)
    load_checkpoint_path: str | None = None  # tinker:// weights to load into the reference; null = base weights

    @model_validator(mode="after")
    def _tinker_path(self) -> KLReference:
        if self.load_checkpoint_path is not None and not self.load_checkpoint_path.startswith("tinker://"):
            raise ValueError(
                f"algo.kl_reference_config.load_checkpoint_path must be a tinker:// path, "
                f"got {self.load_checkpoint_path!r}"
            )
        return self


class RolloutErrorTolerance(_Strict):
    """What a failing rollout (sandbox flake, sampling error) does to its group."""

    # model_default: the cookbook's choice for the model (FailFast, MinViableGroup for Inkling);
    # fail_fast: any error stops training; retry: RetryOnFailure; min_viable_group: MinViableGroup.
    strategy: Literal["model_default", "fail_fast", "retry", "min_viable_group"] = "model_default"
    max_retries: NonNegativeInt = 3  # retry / min_viable_group: retries per group, in all
    per_rollout_timeout: PositiveFloat | None = (
        None  # retry / min_viable_group: seconds before a rollout is retried; null = none
    )
    min_successful: PositiveInt | None = (
        None  # min_viable_group: trajectories a group keeps at least; null = 75% of the group
    )


class TerminationPolicy(_Strict):
    """Reward semantics by stop reason (the cookbook's TerminationRewardPolicy)."""

    enabled: bool = False  # false = the model's default (none, except agentic() for Inkling models)
    zero_reward_on_limit: bool = False  # clamp the reward of limit-stopped trajectories to min(reward, 0)
    limit_stop_reasons: Annotated[list[Literal[LIMIT_STOP_REASONS]], Field(min_length=1)] = list(LIMIT_STOP_REASONS)  # type: ignore[valid-type]  # stop reasons that count as limits
    skip_grading_on_timeout: bool = False  # do not grade rollout_timeout trajectories (reward 0) when clamping
    grader_timeout_seconds: PositiveFloat | None = None  # bound on one grading call; null = none
    pass_all_messages_to_grader: bool = False  # the grader sees the prompt too (false: only the rollout's messages)


class ParseErrors(_Strict):
    """What a malformed model turn (unparsable tool call) does (the cookbook's ParseErrorPolicy)."""

    enabled: bool = (
        False  # false = the model's default (one-shot: reward -0.1 and the episode ends; Inkling: agentic())
    )
    max_consecutive: NonNegativeInt = 0  # content parse failures in a row answered with a corrective message
    retry_message_template: str = (
        "The previous message had a formatting issue.\nError: {details}"  # that message; {details} = the error
    )
    penalty_per_error: NonNegativeFloat = 0.0  # reward of a retried malformed turn is -penalty_per_error
    terminal_reward: float = 0.0  # reward of the turn that ends the episode on a parse error
    mask_error_turns: bool = False  # leave malformed turns out of the loss

    @model_validator(mode="after")
    def _placeholder(self) -> ParseErrors:
        if "{details}" not in self.retry_message_template:
            raise ValueError("algo.parse_errors.retry_message_template must contain {details}")
        return self


class AsyncSettings(_Strict):
    """Off-policy (asynchronous) training; its batch size is mode.groups_per_batch."""

    max_steps_off_policy: PositiveInt | None = None  # train on samples at most this many steps old; null = synchronous


class StreamMinibatchSettings(_Strict):
    """Synchronous training that starts on minibatches as their groups finish."""

    num_minibatches: PositiveInt | None = None  # forward_backward passes per optimizer substep; null = off


class AlgoSettings(_Strict):
    """The RL recipe (a conf/algo preset plus algo.NAME=VALUE overrides)."""

    recipe: str = "default"  # the preset's name, recorded with the run
    loss_fn: Literal[RL_LOSS_FNS] = "importance_sampling"  # type: ignore[valid-type]  # tinker policy-gradient loss
    loss_fn_config: LossFnConfig = LossFnConfig()  # the loss's clip thresholds
    num_substeps: PositiveInt = 1  # optimizer steps per training batch
    kl_penalty_coef: NonNegativeFloat = 0.0  # weight of the KL penalty against the reference policy (0 = off)
    kl_discount_factor: Annotated[float, Field(ge=0, le=1)] = 0.0  # position discount of the KL penalty terms
    kl_reference_config: KLReference = KLReference()  # the KL reference policy
    compute_post_kl: bool = False  # log the KL between the sampling and the updated policy (extra cost)
    remove_constant_reward_groups: bool = False  # drop groups whose rewards are all equal (no signal)
    shuffle_rewards: bool = (
        False  # control: permute total rewards within each group before advantages (a run that must NOT learn)
    )
    rollout_error_tolerance: RolloutErrorTolerance = RolloutErrorTolerance()  # failing rollouts
    termination: TerminationPolicy = TerminationPolicy()  # rewards of limit-stopped trajectories
    parse_errors: ParseErrors = ParseErrors()  # malformed tool calls
    tool_execution: Literal["parallel", "sequential"] | None = None  # a turn's tool calls; null = the model's default
    async_config: AsyncSettings = AsyncSettings()  # off-policy training
    stream_minibatch_config: StreamMinibatchSettings = StreamMinibatchSettings()  # streaming minibatches
    rolling_save_every: NonNegativeInt = 0  # save resumable state (no sampler export) every N steps (0 = never)
    ttl_seconds: PositiveInt | None = DEFAULT_TTL_SECONDS  # periodic checkpoints expire after this; null = never
    rolling_ttl_seconds: PositiveInt = DEFAULT_ROLLING_TTL_SECONDS  # rolling checkpoints expire after this
    num_groups_to_log: NonNegativeInt = 4  # groups whose rollouts are logged per step (0 = none)
    rollout_json_export: bool = True  # write each step's rollouts as JSON lines into the run folder
    enable_trace: bool = False  # write async trace events (debugging, profiling)
    span_chart_every: NonNegativeInt = 0  # write a Gantt chart every N steps (0 = never; needs plotly)

    @model_validator(mode="after")
    def _consistent(self) -> AlgoSettings:
        if (
            self.async_config.max_steps_off_policy is not None
            and self.stream_minibatch_config.num_minibatches is not None
        ):
            raise ValueError("algo.async_config and algo.stream_minibatch_config exclude each other (set one)")
        if self.kl_penalty_coef == 0 and self.kl_reference_config != KLReference():
            raise ValueError("algo.kl_reference_config is only used with algo.kl_penalty_coef > 0")
        if self.shuffle_rewards and self.termination.zero_reward_on_limit:
            raise ValueError(
                "algo.shuffle_rewards cannot be combined with algo.termination.zero_reward_on_limit: the "
                "clamp, applied after the shuffle by each episode's own stop reason, would leak a signal"
            )
        tolerance = self.rollout_error_tolerance
        if tolerance.min_successful is not None and tolerance.strategy != "min_viable_group":
            raise ValueError("algo.rollout_error_tolerance.min_successful is only used with strategy=min_viable_group")
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
