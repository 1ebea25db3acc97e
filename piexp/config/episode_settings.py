"""What one episode is played under, as the run config holds it: the languages, the reward
and the limits (validated into `piexp.config.schema.RunConfig`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from piexp.config.base import NonNegativeFloat
from piexp.config.base import StrictSettings as _Strict


class LanguageSettings(_Strict):
    # The first runtime is the one the prompt names.
    runtimes: Annotated[list[str], Field(min_length=1)] = Field(description="the commands `bash` accepts")
    filename: Annotated[str, Field(min_length=1)] = Field(description="the solution file the prompt asks for")
    # SandboxFusion's id for the language: derived, not configured (None = the language
    # registry's, which RunConfig fills in); accepted from configs saved before it was
    # derived, and refused there when it differs from the registry's.
    sandbox_language: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, description="SandboxFusion's id for the language (derived)"
    )

    @property
    def command(self) -> str:
        """The exact command the prompt asks the model to run."""
        return f"{self.runtimes[0]} {self.filename}"


class RewardWeights(_Strict):
    mutation: NonNegativeFloat = Field(description="reward of a successful write or edit")
    execution: NonNegativeFloat = Field(description="reward of a bash run that exited 0")
    output: NonNegativeFloat = Field(description="reward of a bash run whose last stdout line is the answer")
    answer: NonNegativeFloat = Field(description="reward of a final message whose last integer is the answer")
    # A penalty, so <= 0.
    infrastructure_error: Annotated[float, Field(le=0)] = Field(
        description="the whole reward of an episode that hit an infrastructure error"
    )


class RewardSettings(_Strict):
    mode: Literal["shaped", "binary"] = Field(description="partial credit per step, or 1.0 only when all hold")
    weights: RewardWeights = Field(description="the shaped reward's weight of each step")
    stdout_chars: PositiveInt = Field(description="a bash result's stdout is cut to this many characters")
    stderr_chars: PositiveInt = Field(description="a bash result's stderr is cut to this many characters")
    context_overflow_reward: float = Field(description="reward of an episode that would overflow the context")


class Limits(_Strict):
    max_turns: PositiveInt = Field(description="assistant turns per episode")
    max_tool_calls: PositiveInt = Field(description="tool calls per episode")
    max_trajectory_tokens: PositiveInt = Field(description="prompt and all turns of an episode, in tokens")
    max_generation_tokens: PositiveInt = Field(description="tokens sampled per turn")
    sandbox_timeout_s: PositiveInt = Field(description="wall-clock limit of one bash run in the sandbox")
    # tinker-cookbook RolloutLimits budgets, enforced by its rollout runner (null = none):
    max_sampled_tokens: PositiveInt | None = Field(description="sampled tokens per episode, all turns together")
    max_turn_tokens: PositiveInt | None = Field(
        description="sampled tokens per turn; a cut turn goes on (needs a cumulative budget to end)"
    )
    rollout_timeout_s: PositiveFloat | None = Field(
        description="wall-clock budget of one episode; it ends, still graded"
    )
    sampling_turn_timeout_s: PositiveFloat | None = Field(
        description="wall-clock budget of one sampling call; it fails"
    )

    @model_validator(mode="after")
    def _generation_fits(self) -> Limits:
        if self.max_generation_tokens > self.max_trajectory_tokens:
            raise ValueError(
                f"limits.max_generation_tokens ({self.max_generation_tokens}) exceeds "
                f"limits.max_trajectory_tokens ({self.max_trajectory_tokens})"
            )
        return self
