"""The endings of a Pi episode that Pi's trace does not grade, scored by the reference
environment's rules: a malformed tool call, a turn cut at the generation limit, a prompt
past the trajectory limit.

The last two are tinker-cookbook's `EnvFromMessageEnv` rules: a prompt whose length plus
`limits.max_generation_tokens` exceeds `limits.max_trajectory_tokens` is not sampled (the
first prompt: stop reason `max_tokens`; a later one: `context_overflow`), and a turn the
sampler cut at `limits.max_generation_tokens` (stop reason "length") ends the episode
(`max_tokens`); each with `reward.context_overflow_reward` and no grade. In Pi the
request is refused (`LimitReached`), Pi stops, and `ScoringRule.settle` gives the record
that reward.

In the reference environment a model turn whose every tool call failed to parse (the
renderer found a call but could not read it: broken JSON, no name) is the cookbook's
parse error (`AgentToolMessageEnv.step`): by default the episode ends there, stop reason
`parse_error`, with the cookbook's `failed_parse_reward` and no grading; under
`algo.parse_errors` (the cookbook's `ParseErrorPolicy`) the model is told what was wrong
in a user message and samples again, each such turn costing `penalty_per_error`, until
more than `max_consecutive` in a row end the episode with `terminal_reward`.

Pi would get such a turn as a plain message and end its run on it, so the same turn
would score 0 there and -0.1 in the reference environment: part of a measured harness gap
would be a difference of scoring. `ScoringRule` applies the reference environment's
rule before Pi sees the turn: a retry is answered by piexp (the corrective message is the
next observation; Pi is still waiting for its answer and never sees the malformed turn);
an end refuses Pi's request (`LimitReached`), Pi stops, and the episode is recorded with
stop reason `parse_error` and the rule's rewards in place of a grade.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tinker_cookbook.renderers.base import Message
from tinker_cookbook.rl.rollout_limits import ParseErrorPolicy
from tinker_cookbook.tool_use.agent_tool_message_env import AgentToolMessageEnv

from piexp.policies.rollout import EpisodeRecord

PARSE_ERROR = "parse_error"  # the cookbook's StopReason values, the episode's stop reason
MAX_TOKENS = "max_tokens"
CONTEXT_OVERFLOW = "context_overflow"
# Each ending's flag among the step metrics, as the reference environment sets them.
ENDING_METRICS = {PARSE_ERROR: "parse_error", MAX_TOKENS: "max_tokens_reached", CONTEXT_OVERFLOW: "context_overflow"}
# The reference environment's reward for a parse error with no policy configured: the
# cookbook's own default, read from its env so that the two cannot drift apart.
FAILED_PARSE_REWARD: float = next(
    f.default for f in dataclasses.fields(AgentToolMessageEnv) if f.name == "failed_parse_reward"
)  # type: ignore[assignment]


def malformed_calls(message: Message) -> str | None:
    """The parse errors of a turn that tried to call tools and got none right (None when
    the turn called a tool, or tried none): the cookbook's content parse failure."""
    unparsed = list(message.get("unparsed_tool_calls") or [])
    if not unparsed or message.get("tool_calls"):
        return None
    return "\n".join(str(call.error) for call in unparsed)


@dataclass
class Verdict:
    """What a malformed turn does: `retry` with `message` to the model, or end the episode;
    `reward` is the turn's reward either way."""

    retry: bool
    reward: float
    message: str = ""


@dataclass
class ScoringRule:
    """One episode's scoring of the endings Pi's trace does not grade, under the run's
    parse-error policy (None: the model's default, one-shot) and its context-overflow
    reward. `rewards` holds each such turn's reward, in order; `stop` the ending, once
    one ended the episode."""

    policy: ParseErrorPolicy | None
    overflow_reward: float
    consecutive: int = 0
    errors: int = 0  # malformed turns
    rewards: list[float] = dataclasses.field(default_factory=list)
    stop: str | None = None

    def judge(self, message: Message) -> Verdict | None:
        """None for a turn that is not a parse error (it goes to Pi), else its verdict."""
        details = malformed_calls(message)
        if details is None:
            self.consecutive = 0
            return None
        self.consecutive += 1
        self.errors += 1
        policy = self.policy
        if policy is None:
            verdict = Verdict(retry=False, reward=FAILED_PARSE_REWARD)
        elif self.consecutive <= policy.max_consecutive:
            text = policy.retry_message_template.format(details=details[:2000])
            verdict = Verdict(retry=True, reward=-policy.penalty_per_error, message=text)
        else:
            verdict = Verdict(retry=False, reward=policy.terminal_reward)
        self.rewards.append(verdict.reward)
        if not verdict.retry:
            self.stop = PARSE_ERROR
        return verdict

    def overflow(self, prompt_tokens: int, limits: Any, *, first: bool) -> str | None:
        """The ending of a prompt the model may not be sampled on (None: it may be)."""
        if prompt_tokens + (limits.max_generation_tokens or 0) <= limits.max_trajectory_tokens:
            return None
        return self.end(MAX_TOKENS if first else CONTEXT_OVERFLOW)

    def end(self, stop: str) -> str:
        """End the episode at a limit (`MAX_TOKENS`, `CONTEXT_OVERFLOW`): its reward."""
        self.rewards.append(self.overflow_reward)
        self.stop = stop
        return stop

    def settle(self, record: EpisodeRecord) -> None:
        """The episode's record under the rule: an episode the rule ended has the rule's
        rewards in place of a grade (the same in binary and shaped mode, as in the
        reference environment); a graded one also carries its retried turns' penalties."""
        if record.infrastructure_failure or record.error is not None or not self.rewards:
            return
        if self.errors:
            record.failures[PARSE_ERROR] = self.errors
        if self.stop is not None:
            record.stop_reason = self.stop
            record.reward = record.shaped = sum(self.rewards)
        else:
            record.reward += sum(self.rewards)
            record.shaped += sum(self.rewards)
        if record.transcript is not None:
            record.transcript.update(stop_reason=record.stop_reason, reward=record.reward, shaped=record.shaped,
                                     failures=record.failures)  # fmt: skip
            if record.transcript.get("turns"):
                record.transcript["turns"][-1]["reward"] = record.reward


def retry_messages(malformed: Message, text: str) -> list[Message]:
    """The turns a retry adds to the model's context: its malformed turn, then the
    corrective message (as the reference environment's history holds them)."""
    return [malformed, Message(role="user", content=text)]


def scoring_rule(settings: Any) -> ScoringRule:
    """A new episode's rule under its `EpisodeSettings`: the parse-error policy of the run's
    cookbook `RolloutConfig` (None: none configured) and its context-overflow reward."""
    rollout = settings.rollout
    policy = getattr(rollout, "parse_errors", None) if rollout is not None else None
    return ScoringRule(policy, settings.reward.context_overflow_reward)
