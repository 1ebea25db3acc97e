"""The episode reward, graded from the tool results in the message history."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import Message

from piexp.config.schema import RewardWeights
from piexp.env.tools import RESULT_SCHEMA

REWARD_METRICS = (
    "tool_called",
    "mutation_succeeded",
    "execution_succeeded",
    "execution_output_correct",
    "response_answer_correct",
    "functional_correct",
    "infrastructure_error",
)
# Set on every episode's last transition (piexp.env.episode.WorkspaceEnv): 1 when the
# episode was graded with all four steps holding, 0 otherwise, an episode that ended
# before grading (a turn cut at max_tokens, a context overflow, a parse error) included.
# The cookbook averages a metric over the transitions that report it, so the mean of
# `functional_correct` leaves out the ungraded episodes; the mean of this one, reported by
# every episode once, is the binary pass rate (pass@1 of an eval split: one sample a task).
PASSED_METRIC = "passed"
# The flags (transition metrics) of a last turn that ended the episode before the reward
# was graded: its reward is the env's terminal value, the same in shaped and binary mode
# and under every weight (a turn cut at max_tokens, a context overflow, a parse error).
UNGRADED_ENDINGS = ("max_tokens_reached", "context_overflow", "parse_error")
_INTEGER = re.compile(r"(?<!\w)-?\d+(?!\w)")


def tool_payloads(history: list[Message]) -> list[dict[str, Any]]:
    payloads: list[dict[str, Any]] = []
    for message in history:
        if message.get("role") != "tool":
            continue
        try:
            payload = json.loads(renderers.get_text_content(message))
        except (TypeError, json.JSONDecodeError):
            continue
        if isinstance(payload, dict) and payload.get("schema") == RESULT_SCHEMA:
            payloads.append(payload)
    return payloads


def final_answer(history: list[Message]) -> str | None:
    """The last integer in the last assistant message (None if it has none)."""
    for message in reversed(history):
        if message.get("role") != "assistant":
            continue
        values = _INTEGER.findall(renderers.get_text_content(message))
        return values[-1] if values else None
    return None


@dataclass(frozen=True)
class WorkspaceReward:
    """Shaped: weighted partial credit, 1.0 when all four hold. Binary: 1.0 only when all
    four hold. Either way the infrastructure-error value when the sandbox failed."""

    answer: str
    weights: RewardWeights
    binary: bool = False

    async def __call__(self, history: list[Message]) -> tuple[float, dict[str, float]]:
        return self.grade(history)

    def grade(self, history: list[Message]) -> tuple[float, dict[str, float]]:
        payloads = tool_payloads(history)
        mutation = any(p.get("tool") in {"write", "edit"} and p.get("status") == "ok" for p in payloads)
        bash_results = [p for p in payloads if p.get("tool") == "bash"]
        executed = any(p.get("status") == "ok" for p in bash_results)
        output_correct = any(bool(p.get("output_correct")) for p in bash_results)
        final_correct = final_answer(history) == self.answer
        infrastructure_error = any(p.get("status") == "infrastructure_error" for p in payloads)
        fully_correct = mutation and executed and output_correct and final_correct
        metrics = {
            "tool_called": float(bool(payloads)),
            "mutation_succeeded": float(mutation),
            "execution_succeeded": float(executed),
            "execution_output_correct": float(output_correct),
            "response_answer_correct": float(final_correct),
            "functional_correct": float(fully_correct),
            "infrastructure_error": float(infrastructure_error),
        }
        return steps_reward(metrics, self.weights, binary=self.binary), metrics


def steps_reward(metrics: Mapping[str, float], weights: RewardWeights, *, binary: bool) -> float:
    """The reward of an episode whose four steps (and infrastructure error) are `metrics`
    (`REWARD_METRICS`): shaped, weighted partial credit and 1.0 when all four hold;
    binary, 1.0 only then; the infrastructure-error value when the sandbox failed. Every
    harness grades with it, and `rescore` regrades recorded steps under other weights."""
    if metrics.get("infrastructure_error"):
        return weights.infrastructure_error
    if binary or metrics.get("functional_correct"):
        return float(bool(metrics.get("functional_correct")))
    return (
        weights.mutation * bool(metrics.get("mutation_succeeded"))
        + weights.execution * bool(metrics.get("execution_succeeded"))
        + weights.output * bool(metrics.get("execution_output_correct"))
        + weights.answer * bool(metrics.get("response_answer_correct"))
    )
