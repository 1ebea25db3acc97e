"""Scripted policies: token completers that act like a model with a fixed plan.

They emit exactly the tokens the run's renderer would produce for the assistant message
they choose, so the env's normal path (parse -> tool call -> tool result -> next
observation -> reward) runs unchanged: a check passed by `oracle` is a check of the very
path a sampled model takes, and the reward each non-solving policy gets is the reward a
model behaving that way would get.

Each policy decides from the observation alone (see `observation.py`): the number of tool
results so far says which step of its plan comes next. The oracle finds the task family
by matching the prompt's instruction and file list against the run's task list, then uses
the family's reference program; it never reads a task's stored answer: its final answer
is the integer parsed from the bash tool's stdout, so a broken reference or a wrong stored
answer shows up as a failed episode instead of being papered over.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.renderers.base import Message, RenderContext, ToolCall

import piexp.tasks as task_registry
from piexp.cookbook_compat import generation_suffix
from piexp.policies import programs
from piexp.policies.observation import (
    DecodeCache,
    Observation,
    ObservationError,
    decode_model_input,
    parse_observation,
    printed_integer,
)
from piexp.tasks import Task


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: dict[str, Any]

    def to_tool_call(self, index: int) -> ToolCall:
        return ToolCall(
            function=ToolCall.FunctionBody(name=self.tool, arguments=json.dumps(self.arguments)),
            id=f"call_{index}",
        )


@dataclass(frozen=True)
class Act:
    """One assistant turn that calls tools (several calls run in parallel in the env, so
    only independent calls share a turn)."""

    calls: tuple[Call, ...]
    say: str = ""


@dataclass(frozen=True)
class Answer:
    """The last turn: text without tool calls; the env grades the episode after it."""

    text: Callable[[Observation], str]


Step = Act | Answer


def render_assistant_tokens(
    renderer: renderers.Renderer,
    message: Message,
    stop: StopCondition | None = None,
    *,
    prefill: list[int] | None = None,
) -> list[int]:
    """The tokens a model sampling after the generation prompt would emit for `message`.

    That is the `output` part of the rendered message (text, tool calls, end-of-turn
    token), minus whatever the generation prompt already prefilled after the role header
    (e.g. an empty think block), and ending with a stop token when stops are token ids.
    """
    ctx = RenderContext(idx=1, is_last=True, in_last_assistant_turn=True)
    rendered = renderer.render_message(message, ctx)
    tokens: list[int] = []
    for chunk in rendered.output:
        if not isinstance(chunk, tinker.EncodedTextChunk):
            raise TypeError("scripted policies only emit text")
        tokens.extend(chunk.tokens)
    if prefill is None:
        prefill = generation_prefill(renderer)
    if prefill and tokens[: len(prefill)] == prefill:
        tokens = tokens[len(prefill) :]
    stop_ids = [s for s in (stop or []) if isinstance(s, int)]
    if stop_ids and (not tokens or tokens[-1] not in stop_ids):
        tokens.append(stop_ids[0])
    return tokens


def generation_prefill(renderer: renderers.Renderer) -> list[int]:
    """Tokens the generation prompt puts after the assistant header (the model never
    samples them). Fixed per renderer, so policies compute it once."""
    ctx = RenderContext(idx=1, is_last=True, in_last_assistant_turn=True)
    rendered = renderer.render_message({"role": "assistant", "content": ""}, ctx)
    header = list(rendered.header.tokens) if rendered.header is not None else []
    suffix = generation_suffix(renderer, "assistant", ctx)
    if suffix[: len(header)] == header:
        return list(suffix[len(header) :])
    return []


# The scripted policies that can play a task graded by its own verifier (an imported
# Harbor task), whose prompt is its instruction: its oracle, and a no-op (`guess`).
VERIFIED_TASK_POLICIES = ("oracle", "guess")


class ScriptedPolicy(TokenCompleter):
    """Base class: subclasses give `plan(observation)`; the base picks the step the
    observation has reached and renders it."""

    name: ClassVar[str] = ""
    needs_tasks: ClassVar[bool] = False

    def __init__(
        self,
        renderer: renderers.Renderer,
        tasks: Iterable[Task] = (),
        *,
        guess: str = "0",
    ) -> None:
        self.renderer = renderer
        self._prefill = generation_prefill(renderer)
        # A memo of decoded inputs (not episode state): each turn decodes only new tokens.
        self._decoded = DecodeCache()
        self.guess = str(int(guess))
        # Keyed by what the model sees of a task, never by its answer.
        # Tasks of a task file may share instruction and file names (their contents
        # differ): such a key holds several tasks, told apart by what `read` showed.
        self._tasks: dict[tuple[str, tuple[str, ...]], list[Task]] = {}
        for task in tasks:
            self._tasks.setdefault((task.instruction, tuple(sorted(task.files))), []).append(task)

    def plan(self, observation: Observation) -> list[Step]:
        raise NotImplementedError

    async def __call__(
        self,
        model_input: tinker.ModelInput,
        stop: StopCondition,
        *,
        max_tokens: int | None = None,
    ) -> TokensWithLogprobs:
        observation = parse_observation(decode_model_input(self.renderer, model_input, self._decoded))
        message = self.next_message(observation)
        tokens = render_assistant_tokens(self.renderer, message, stop, prefill=self._prefill)
        stop_reason: tinker.StopReason = "stop"
        if max_tokens is not None and len(tokens) > max_tokens:
            # What a sampler does at its budget: cut the turn and report "length".
            tokens, stop_reason = tokens[:max_tokens], "length"
        # A scripted policy picks each token with probability 1.
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens), stop_reason=stop_reason)

    def next_message(self, observation: Observation) -> Message:
        step = self.current_step(observation)
        if isinstance(step, Answer):
            return {"role": "assistant", "content": step.text(observation)}
        return {
            "role": "assistant",
            "content": step.say,
            "tool_calls": [call.to_tool_call(i) for i, call in enumerate(step.calls)],
        }

    def current_step(self, observation: Observation) -> Step:
        """The step after the one whose tool results are the last ones seen. If the count
        of results matches no step boundary (a call was dropped by a limit), answer."""
        # An Act without calls would end the episode (no tool calls = final answer).
        steps = [s for s in self.plan(observation) if not (isinstance(s, Act) and not s.calls)]
        seen = len(observation.results)
        done = 0
        for step in steps:
            if isinstance(step, Answer):
                return step
            if done == seen:
                return step
            done += len(step.calls)
            if done > seen:
                break
        return steps[-1] if isinstance(steps[-1], Answer) else Answer(self.answer_guess)

    # Shared pieces of plans.

    def family_of(self, observation: Observation) -> str:
        return self.task_of(observation).family

    def task_of(self, observation: Observation) -> Task:
        """The task in the prompt; among tasks that look alike in the prompt, the one whose
        files match what the episode's `read` calls returned (before any read: the first,
        whose reference only a plan step not yet taken uses; oracle and edit read first)."""
        key = (observation.instruction, tuple(sorted(observation.files)))
        try:
            candidates = self._tasks[key]
            if len(candidates) > 1:
                seen = {
                    str(result.get("path")): result.get("content")
                    for result in observation.results
                    if result.get("tool") == "read" and result.get("status") == "ok"
                }
                matching = [t for t in candidates if all(t.files.get(p) == c for p, c in seen.items())]
                candidates = matching or candidates
            return candidates[0]
        except KeyError:
            raise ObservationError(
                f"the {self.name} policy was not given the task in this prompt; build it "
                "with the run's tasks (make_policy(..., tasks=...))"
            ) from None

    def reference(self, observation: Observation) -> str:
        # Looked up through the module at call time, so a test can monkeypatch it; a task
        # file's task has its own reference, a generator family one for all its tasks.
        return task_registry.task_reference(self.task_of(observation), observation.language)

    @staticmethod
    def read_all(observation: Observation) -> Act:
        return Act(
            tuple(Call("read", {"path": name}) for name in observation.files),
            say="Reading the input files first.",
        )

    @staticmethod
    def run(observation: Observation) -> Act:
        return Act((Call("bash", {"command": observation.command}),), say="Running the program.")

    @staticmethod
    def answer_printed(observation: Observation) -> str:
        """The integer the last run printed (the oracle's and the wrong policy's answer)."""
        runs = observation.bash_results()
        value = printed_integer(runs[-1]) if runs else None
        if value is None:
            return "The program did not print an integer, so I have no answer."
        return f"The program printed the result. The answer is {value}"

    def answer_guess(self, _observation: Observation) -> str:
        return f"I did not compute it; my guess is {self.guess}"


class OraclePolicy(ScriptedPolicy):
    """read inputs -> write the family's reference -> run it -> state what it printed."""

    name = "oracle"
    needs_tasks = True

    def plan(self, observation: Observation) -> list[Step]:
        return [
            self.read_all(observation),
            Act(
                (Call("write", {"path": observation.filename, "content": self.reference(observation)}),),
                say="Writing the solution.",
            ),
            self.run(observation),
            Answer(self.answer_printed),
        ]


class GuessPolicy(ScriptedPolicy):
    """Answers a number without using any tool."""

    name = "guess"

    def plan(self, observation: Observation) -> list[Step]:
        return [Answer(self.answer_guess)]


class CrashPolicy(ScriptedPolicy):
    """Writes a program that raises, runs it, then guesses."""

    name = "crash"

    def plan(self, observation: Observation) -> list[Step]:
        return [
            Act(
                (Call("write", {"path": observation.filename, "content": programs.crash(observation.language)}),),
                say="Writing the solution.",
            ),
            self.run(observation),
            Answer(self.answer_guess),
        ]


class WrongPolicy(ScriptedPolicy):
    """Writes a program that prints a different integer (the reference's plus one), runs
    it, and answers what it printed."""

    name = "wrong"
    needs_tasks = True

    def plan(self, observation: Observation) -> list[Step]:
        helper = programs.helper_filename(observation.language, set(observation.files) | {observation.filename})
        return [
            Act(
                (
                    Call("write", {"path": helper, "content": self.reference(observation)}),
                    Call(
                        "write",
                        {"path": observation.filename, "content": programs.off_by_one(observation.language, helper)},
                    ),
                ),
                say="Writing the solution.",
            ),
            self.run(observation),
            Answer(self.answer_printed),
        ]


class EditPolicy(ScriptedPolicy):
    """read -> write a broken program -> run it (fails) -> fix it with `edit` -> run it ->
    state what it printed. Exercises `edit` and a failed run followed by a good one."""

    name = "edit"
    needs_tasks = True

    def plan(self, observation: Observation) -> list[Step]:
        bug = programs.bug_line(observation.language)
        return [
            self.read_all(observation),
            Act(
                (Call("write", {"path": observation.filename, "content": bug + self.reference(observation)}),),
                say="Writing the solution.",
            ),
            self.run(observation),
            Act(
                (Call("edit", {"path": observation.filename, "oldText": bug, "newText": ""}),),
                say="The first line is a bug; removing it.",
            ),
            self.run(observation),
            Answer(self.answer_printed),
        ]


POLICIES: dict[str, type[ScriptedPolicy]] = {
    policy.name: policy for policy in (OraclePolicy, GuessPolicy, CrashPolicy, WrongPolicy, EditPolicy)
}


def make_policy(
    name: str,
    renderer: renderers.Renderer,
    tasks: Sequence[Task] = (),
    *,
    guess: str = "0",
) -> ScriptedPolicy:
    """A scripted policy by name. `tasks`: the run's tasks (both splits), which the
    policies that write the reference need to recognise a prompt's family."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown scripted policy {name!r}; choose from {', '.join(POLICIES)}") from None
    return cls(renderer, tasks, guess=guess)
