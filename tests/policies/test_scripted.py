"""Scripted policies through the real renderer, env, tools, embedded sandbox and
tinker-cookbook rollout code.

The non-solving policies are the reward's regression suite: each must get exactly the
reward the reference formula gives for what it did, metric by metric.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil

import pytest

from piexp.config.defaults import default_settings
from piexp.config.schema import LanguageSettings, Limits, RewardSettings, RewardWeights
from piexp.env.episode import EpisodeSettings, build_workspace_env, get_run_renderer
from piexp.env.reward import REWARD_METRICS
from piexp.policies import ObservationError, make_policy, parse_observation
from piexp.policies.observation import decode_model_input
from piexp.policies.rollout import run_episode
from piexp.tasks import FAMILIES, build_tasks

LANGUAGES = {
    "python": LanguageSettings(runtimes=["python", "python3"], filename="solution.py"),
    "javascript": LanguageSettings(runtimes=["node"], filename="solution.js"),
    "julia": LanguageSettings(runtimes=["julia"], filename="solution.jl"),
}
INSTRUCT = ("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507")
THINKING = ("qwen3", "Qwen/Qwen3-8B")
JULIA_SKIP = pytest.mark.skipif(
    shutil.which("julia") is None, reason="julia is not on PATH here, so the sandbox has no Julia runtime"
)
OFFLINE_LANGUAGES = ["python", "javascript", pytest.param("julia", marks=JULIA_SKIP)]
REWARD = default_settings("reward", RewardSettings)


@pytest.fixture(scope="module")
def tasks():
    return build_tasks("train", 1, 0, list(FAMILIES)) + build_tasks("eval", 1, 0, list(FAMILIES))


def settings_for(url: str, renderer=INSTRUCT, weights: RewardWeights | None = None) -> EpisodeSettings:
    return EpisodeSettings(
        model_name=renderer[1],
        renderer_name=renderer[0],
        languages=LANGUAGES,
        limits=default_settings("limits", Limits),
        reward=REWARD.model_copy(update={"weights": weights or REWARD.weights}),
        sandbox_url=url,
    )


def run(coroutine):
    return asyncio.run(coroutine)


def episode(policy_name, task, language, settings, tasks, **kwargs):
    renderer = get_run_renderer(settings.renderer_name, settings.model_name)
    policy = make_policy(policy_name, renderer, tasks, **kwargs)
    return run(run_episode(policy, policy_name, task, language, settings))


# Rendering and observation (no sandbox needed) -------------------------------------------


@pytest.mark.parametrize("renderer", [INSTRUCT, THINKING], ids=["qwen3_instruct", "qwen3"])
@pytest.mark.parametrize("policy_name", ["oracle", "guess", "crash", "wrong", "edit"])
def test_first_action_parses_back_to_the_intended_message(renderer, policy_name, tasks):
    """The emitted tokens are what the renderer parses back into the same tool calls (or
    text), and end with the renderer's stop token."""
    settings = settings_for("http://127.0.0.1:9/run_code", renderer)
    r = get_run_renderer(*renderer)
    task = tasks[0]
    env = build_workspace_env(task=task, language="python", settings=settings, renderer=r, evaluation=True)
    model_input, stop = run(env.initial_observation())
    policy = make_policy(policy_name, r, tasks)
    observation = parse_observation(decode_model_input(r, model_input))
    intended = policy.next_message(observation)
    result = run(policy(model_input, stop))
    assert result.stop_reason == "stop"
    assert result.tokens[-1] in stop
    parsed, termination = r.parse_response(result.tokens)
    assert termination.is_clean
    want = [(c.function.name, json.loads(c.function.arguments)) for c in intended.get("tool_calls", [])]
    got = [(c.function.name, json.loads(c.function.arguments)) for c in parsed.get("tool_calls", [])]
    assert got == want
    if not want:
        text = (
            parsed["content"]
            if isinstance(parsed["content"], str)
            else "".join(p.get("text", "") for p in parsed["content"] if p["type"] == "text")
        )
        assert text.strip() == intended["content"]


def test_observation_reads_the_prompt(tasks):
    settings = settings_for("http://127.0.0.1:9/run_code")
    r = get_run_renderer(*INSTRUCT)
    task = tasks[1]
    for language, spec in LANGUAGES.items():
        env = build_workspace_env(task=task, language=language, settings=settings, renderer=r, evaluation=True)
        model_input, _stop = run(env.initial_observation())
        observation = parse_observation(decode_model_input(r, model_input))
        assert observation.language == language
        assert observation.instruction == task.instruction
        assert observation.files == tuple(sorted(task.files))
        assert observation.filename == spec.filename
        assert observation.command == spec.command
        assert observation.results == ()


def test_max_tokens_cuts_the_turn_like_a_sampler(tasks):
    settings = settings_for("http://127.0.0.1:9/run_code")
    r = get_run_renderer(*INSTRUCT)
    env = build_workspace_env(task=tasks[0], language="python", settings=settings, renderer=r, evaluation=True)
    model_input, stop = run(env.initial_observation())
    result = run(make_policy("guess", r)(model_input, stop, max_tokens=3))
    assert len(result.tokens) == 3 and result.stop_reason == "length"


def test_policy_without_the_task_list_refuses(sandbox_url, tasks):
    record = episode("oracle", tasks[0], "python", settings_for(sandbox_url), tasks=[])
    assert record.error is not None and "ObservationError" in record.error
    with pytest.raises(ObservationError):
        parse_observation("no workspace prompt here")


# The oracle solves every family ---------------------------------------------------------


@pytest.mark.parametrize("language", OFFLINE_LANGUAGES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_oracle_solves_every_family(sandbox_url, tasks, family, language):
    task = next(t for t in tasks if t.family == family)
    record = episode("oracle", task, language, settings_for(sandbox_url), tasks)
    assert record.error is None, record.error
    assert record.reward == 1.0, record.last_run
    assert record.shaped == 1.0
    assert record.answer == task.answer
    assert record.stop_reason == "completed"
    assert all(record.metrics[name] == (0.0 if name == "infrastructure_error" else 1.0) for name in REWARD_METRICS)


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_oracle_with_the_thinking_renderer(sandbox_url, tasks, language):
    record = episode("oracle", tasks[0], language, settings_for(sandbox_url, THINKING), tasks)
    assert record.error is None, record.error
    assert record.reward == 1.0 and record.answer == tasks[0].answer


# The reward's regression suite ------------------------------------------------------------


def formula(weights: RewardWeights, flags: dict[str, float]) -> float:
    """The reference's shaped reward, written out independently of piexp.env.reward."""
    if flags["infrastructure_error"]:
        return weights.infrastructure_error
    if flags["functional_correct"]:
        return 1.0
    return (
        weights.mutation * flags["mutation_succeeded"]
        + weights.execution * flags["execution_succeeded"]
        + weights.output * flags["execution_output_correct"]
        + weights.answer * flags["response_answer_correct"]
    )


def flags(tool, mutation, execution, output, answer):
    values = dict(
        tool_called=tool,
        mutation_succeeded=mutation,
        execution_succeeded=execution,
        execution_output_correct=output,
        response_answer_correct=answer,
    )
    values["functional_correct"] = float(mutation and execution and output and answer)
    values["infrastructure_error"] = 0.0
    return {k: float(v) for k, v in values.items()}


EXPECTED = {
    # policy: (metrics, turns)
    "guess": (flags(0, 0, 0, 0, 0), 1),
    "crash": (flags(1, 1, 0, 0, 0), 3),
    "wrong": (flags(1, 1, 1, 0, 0), 3),
    "edit": (flags(1, 1, 1, 1, 1), 6),
}
# Non-default weights, so a formula with hard-coded constants would fail.
WEIGHTS = [
    REWARD.weights,
    REWARD.weights.model_copy(update=dict(mutation=0.2, execution=0.05, output=0.5, answer=0.25)),
]


@pytest.mark.parametrize("weights", WEIGHTS, ids=["default", "custom"])
@pytest.mark.parametrize("language", ["python", "javascript"])
@pytest.mark.parametrize("policy_name", list(EXPECTED))
def test_non_solving_policy_gets_the_formula_reward(sandbox_url, tasks, policy_name, language, weights):
    task = tasks[2]
    record = episode(policy_name, task, language, settings_for(sandbox_url, weights=weights), tasks)
    metrics, turns = EXPECTED[policy_name]
    assert record.error is None, record.error
    assert record.metrics == metrics
    assert record.shaped == pytest.approx(formula(weights, metrics), abs=1e-12)
    assert record.reward == metrics["functional_correct"]  # binary
    assert record.turns == turns
    assert record.stop_reason == "completed"


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_right_guesses_earn_only_the_answer_weight(sandbox_url, tasks, language):
    """A guess that happens to be right: null earns the answer weight, crash mutation plus
    answer weight; neither passes."""
    task = tasks[3]
    weights = REWARD.weights
    settings = settings_for(sandbox_url, weights=weights)
    # The test knows the answer; the policy is only told what to guess.
    null = episode("guess", task, language, settings, tasks, guess=task.answer)
    assert null.metrics == flags(0, 0, 0, 0, 1)
    assert null.shaped == pytest.approx(weights.answer) and null.reward == 0.0
    crash = episode("crash", task, language, settings, tasks, guess=task.answer)
    assert crash.metrics == flags(1, 1, 0, 0, 1)
    assert crash.shaped == pytest.approx(weights.mutation + weights.answer) and crash.reward == 0.0


def test_oracle_states_what_ran_not_the_stored_answer(sandbox_url, tasks):
    """With a wrong stored answer the oracle still states the program's output, so the
    episode fails instead of being rescued by the stored value."""
    task = tasks[0]
    wrong = dataclasses.replace(task, answer=str(int(task.answer) + 7))
    record = episode("oracle", wrong, "python", settings_for(sandbox_url), [wrong])
    assert record.answer == task.answer
    assert record.reward == 0.0
    assert record.metrics["execution_succeeded"] == 1.0 and record.metrics["execution_output_correct"] == 0.0
