"""The run's rollout policy in tinker-cookbook's own types: the `RolloutConfig` every
episode is built with (budgets, parse errors, tool order, grading), the trainer-side
`TerminationRewardPolicy` and the group `RolloutStrategy`, from the `limits` and `algo`
config. What the config leaves unset stays the model's default
(`rollout_presets.default_rollout_config_for_model`), so an unconfigured run behaves
exactly as before these options existed."""

from __future__ import annotations

import chz
from tinker_cookbook.rl.rollout_limits import ParseErrorPolicy, RolloutLimits, TerminationRewardPolicy
from tinker_cookbook.rl.rollout_presets import RolloutConfig, default_rollout_config_for_model
from tinker_cookbook.rl.rollout_strategy import FailFast, MinViableGroup, RetryOnFailure, RolloutStrategy

from piexp.config.algo import AlgoSettings
from piexp.config.schema import Limits

# `algo.infrastructure_errors=mask`: a group keeps at least this many episodes, or is dropped.
MASKED_GROUP_MIN_EPISODES = 2


def termination_policy(algo: AlgoSettings) -> TerminationRewardPolicy | None:
    """The configured policy, or None (the cookbook then uses the model's default)."""
    policy = algo.termination
    if not policy.enabled:
        return None
    return TerminationRewardPolicy(
        zero_reward_on_limit=policy.zero_reward_on_limit,
        limit_stop_reasons=tuple(policy.limit_stop_reasons),
        skip_grading_on_timeout=policy.skip_grading_on_timeout,
        grader_timeout_seconds=policy.grader_timeout_seconds,
        pass_all_messages_to_grader=policy.pass_all_messages_to_grader,
    )


def parse_error_policy(algo: AlgoSettings) -> ParseErrorPolicy | None:
    """The configured policy, or None (the model's default)."""
    policy = algo.parse_errors
    if not policy.enabled:
        return None
    return ParseErrorPolicy(
        max_consecutive=policy.max_consecutive,
        retry_message_template=policy.retry_message_template,
        penalty_per_error=policy.penalty_per_error,
        terminal_reward=policy.terminal_reward,
        mask_error_turns=policy.mask_error_turns,
    )


def rollout_limits(limits: Limits, base: RolloutLimits) -> RolloutLimits:
    """`base` with the runner budgets `limits` sets. Turns, tool calls and trajectory
    tokens are not among them: the env enforces piexp's own (`build_agent_tool_env`
    arguments), with its context-overflow reward, as it always did."""
    budgets = {
        "max_sampled_tokens": limits.max_sampled_tokens,
        "max_turn_tokens": limits.max_turn_tokens,
        "rollout_timeout_seconds": limits.rollout_timeout_s,
        "sampling_turn_timeout_seconds": limits.sampling_turn_timeout_s,
    }
    return chz.replace(base, **{key: value for key, value in budgets.items() if value is not None})


def rollout_config(model_name: str, limits: Limits, algo: AlgoSettings) -> RolloutConfig:
    """The env-side rollout configuration: the model's default with what is configured."""
    base = default_rollout_config_for_model(model_name)
    changes: dict[str, object] = {"limits": rollout_limits(limits, base.limits)}
    if (parse_errors := parse_error_policy(algo)) is not None:
        changes["parse_errors"] = parse_errors
    if (termination := termination_policy(algo)) is not None:
        changes["termination"] = termination
    if algo.tool_execution is not None:
        changes["tool_execution"] = algo.tool_execution
    return chz.replace(base, **changes)


def rollout_error_tolerance(algo: AlgoSettings, episode_retries: int, group_size: int) -> RolloutStrategy | None:
    """`rl.train.Config.rollout_error_tolerance`: None is the model's default. Left to the
    model's default, `algo.infrastructure_errors` chooses: `retry` re-rolls an episode
    whose sandbox failed (`episode_retries` x the group's size per group, the cookbook's
    budget being the group's; past them the group is dropped),
    `mask` drops it from its group and drops a group left with fewer than two episodes
    (no advantage without a second), `penalize` keeps the model's default (the episode is
    scored, as in the reference environment)."""
    tolerance = algo.rollout_error_tolerance
    if tolerance.strategy == "model_default":
        if algo.infrastructure_errors == "retry":
            return RetryOnFailure(max_retries=episode_retries * group_size)
        if algo.infrastructure_errors == "mask":
            return MinViableGroup(min_successful=min(MASKED_GROUP_MIN_EPISODES, group_size), max_retries=0)
        return None
    if tolerance.strategy == "fail_fast":
        return FailFast()
    if tolerance.strategy == "retry":
        return RetryOnFailure(max_retries=tolerance.max_retries, per_rollout_timeout=tolerance.per_rollout_timeout or 0)
    return MinViableGroup(
        min_successful=tolerance.min_successful,
        max_retries=tolerance.max_retries,
        per_rollout_timeout=tolerance.per_rollout_timeout,
    )
