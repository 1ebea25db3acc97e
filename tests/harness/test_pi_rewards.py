"""The reward's regression rows through the real Pi coding agent: each scripted policy
answers Pi's own requests (its tool schema, its plain-text results), Pi runs its tools in
piexp's sandbox, and the reward graded from Pi's events must be the row the reference
environment gives the same behaviour (tests/policies/test_scripted.py), metric by metric."""

from __future__ import annotations

import dataclasses

import pytest

from piexp.env.episode import get_run_renderer
from piexp.env.reward import REWARD_METRICS
from piexp.policies import make_policy
from tests.harness.conftest import MODEL, REWARD, episode_settings, play_all, requires_pi

pytestmark = requires_pi


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


def formula(weights, metrics):
    if metrics["functional_correct"]:
        return 1.0
    return (
        weights.mutation * metrics["mutation_succeeded"]
        + weights.execution * metrics["execution_succeeded"]
        + weights.output * metrics["execution_output_correct"]
        + weights.answer * metrics["response_answer_correct"]
    )


# policy: (metrics, turns), the reference environment's rows.
EXPECTED = {
    "oracle": (flags(1, 1, 1, 1, 1), 4),
    "guess": (flags(0, 0, 0, 0, 0), 1),
    "crash": (flags(1, 1, 0, 0, 0), 3),
    "wrong": (flags(1, 1, 1, 0, 0), 3),
    "edit": (flags(1, 1, 1, 1, 1), 6),
}
CUSTOM = REWARD.weights.model_copy(update=dict(mutation=0.2, execution=0.05, output=0.5, answer=0.25))


def _play(policy_name, task, language, settings, tasks, **kwargs):
    renderer = get_run_renderer(*MODEL)
    policy = make_policy(policy_name, renderer, tasks, **kwargs)
    return lambda harness: harness.play(policy, policy_name, task, language, settings)


@pytest.mark.parametrize("weights", [REWARD.weights, CUSTOM], ids=["default", "custom"])
def test_each_scripted_policy_gets_the_reference_row_through_pi(tasks, weights):
    """Every policy in Python and JavaScript (10 Pi episodes at once), with the default
    weights and custom ones, so a formula with the defaults written in would fail."""
    settings = episode_settings(reward=REWARD.model_copy(update={"weights": weights}))
    task = tasks[2]
    jobs = [(p, lang) for p in EXPECTED for lang in ("python", "javascript")]
    records = play_all([_play(p, task, lang, settings, tasks) for p, lang in jobs])
    for (policy_name, language), record in zip(jobs, records):
        metrics, turns = EXPECTED[policy_name]
        where = f"{policy_name} x {language}"
        assert record.error is None, (where, record.error, record.last_run)
        assert record.metrics == metrics, where
        assert record.shaped == pytest.approx(formula(weights, metrics), abs=1e-12), where
        assert record.reward == metrics["functional_correct"], where
        assert record.turns == turns, where
        assert record.stop_reason == "completed", where
        assert set(record.metrics) == set(REWARD_METRICS)


def test_right_guess_earns_only_the_answer_weight(tasks):
    """guess and crash told the right answer: the answer weight (plus mutation for crash),
    never a pass; and the oracle states what its program printed, not the stored answer."""
    task = tasks[3]
    settings = episode_settings()
    wrong_answer = dataclasses.replace(task, answer=str(int(task.answer) + 7))
    guess, crash, oracle = play_all(
        [
            _play("guess", task, "python", settings, tasks, guess=task.answer),
            _play("crash", task, "python", settings, tasks, guess=task.answer),
            _play("oracle", wrong_answer, "python", settings, [wrong_answer]),
        ]
    )
    assert guess.metrics == flags(0, 0, 0, 0, 1) and guess.reward == 0.0
    assert guess.shaped == pytest.approx(REWARD.weights.answer)
    assert crash.metrics == flags(1, 1, 0, 0, 1) and crash.reward == 0.0
    assert oracle.answer == task.answer and oracle.reward == 0.0
    assert oracle.metrics["execution_succeeded"] == 1.0 and oracle.metrics["execution_output_correct"] == 0.0


def test_the_transcript_holds_pi_s_prompt_at_fixed_paths(tasks):
    """Pi's system prompt names its install prefix and working directory: inside the
    sandbox both are fixed paths, so the prompt is the same on every machine."""
    (record,) = play_all([_play("oracle", tasks[0], "python", episode_settings(), tasks)])
    transcript = record.transcript
    assert transcript is not None and transcript["harness"] == "pi"
    system = transcript["prompt"][0]
    assert system["role"] == "system" and "running inside pi" in system["text"]
    assert "/opt/pi/node_modules/@earendil-works/pi-coding-agent/README.md" in system["text"]
    assert system["text"].rstrip().endswith("<cwd>\n/sandbox\n</cwd>")
    assert transcript["prompt"][1]["role"] == "user"
    calls = [c["name"] for m in transcript["conversation"] for c in m.get("tool_calls", [])]
    assert calls[-2:] == ["write", "bash"] and set(calls[:-2]) == {"read"}
    assert (
        transcript["conversation"][-1]["role"] == "assistant"
        and record.answer in transcript["conversation"][-1]["text"]
    )
