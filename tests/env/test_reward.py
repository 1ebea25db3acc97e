"""Every row of the reward table (shaped and binary, custom weights) and every metric."""

from __future__ import annotations

import itertools
import json

import pytest

from piexp.config.defaults import default_settings
from piexp.config.schema import RewardSettings, RewardWeights
from piexp.env.reward import REWARD_METRICS, WorkspaceReward, final_answer
from piexp.env.tools import RESULT_SCHEMA


def tool_message(tool: str, status: str, **payload: object) -> dict:
    body = {"schema": RESULT_SCHEMA, "tool": tool, "status": status, **payload}
    return {"role": "tool", "content": json.dumps(body, sort_keys=True)}


def history(mutation: bool, executed: bool, output: bool, answer: bool, infra: bool = False) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "task"}]
    messages.append(tool_message("write", "ok" if mutation else "error"))
    if executed or output:
        messages.append(tool_message("bash", "ok" if executed else "submission_error", output_correct=output))
    if infra:
        messages.append(tool_message("bash", "infrastructure_error", error="down"))
    messages.append({"role": "assistant", "content": f"The answer is {'42' if answer else '41'}."})
    return messages


# The shipped weights (conf/reward/shaped.yaml), which the rows below spell out.
WEIGHTS = default_settings("reward", RewardSettings).weights
# output_correct implies exit 0, so rows with output but no execution cannot occur.
ROWS = [row for row in itertools.product([False, True], repeat=4) if not (row[2] and not row[1])]


@pytest.mark.parametrize("row", ROWS)
def test_shaped_and_binary_rows(row: tuple[bool, bool, bool, bool]) -> None:
    mutation, executed, output, answer = row
    messages = history(*row)
    shaped, metrics = WorkspaceReward("42", WEIGHTS).grade(messages)
    binary, _ = WorkspaceReward("42", WEIGHTS, binary=True).grade(messages)
    all_four = all(row)
    expected = 1.0 if all_four else 0.15 * mutation + 0.15 * executed + 0.6 * output + 0.1 * answer
    assert shaped == pytest.approx(expected)
    assert binary == float(all_four)
    assert metrics == {
        "tool_called": 1.0,
        "mutation_succeeded": float(mutation),
        "execution_succeeded": float(executed),
        "execution_output_correct": float(output),
        "response_answer_correct": float(answer),
        "functional_correct": float(all_four),
        "infrastructure_error": 0.0,
    }
    assert tuple(metrics) == REWARD_METRICS


def test_infrastructure_error_overrides_everything() -> None:
    messages = history(True, True, True, True, infra=True)
    for binary in (False, True):
        reward, metrics = WorkspaceReward("42", WEIGHTS, binary=binary).grade(messages)
        assert reward == -0.1 and metrics["infrastructure_error"] == 1.0


def test_custom_weights() -> None:
    weights = RewardWeights(mutation=0.2, execution=0.3, output=0.4, answer=0.05, infrastructure_error=-0.5)
    reward, _ = WorkspaceReward("42", weights).grade(history(True, True, False, True))
    assert reward == pytest.approx(0.55)
    reward, _ = WorkspaceReward("42", weights).grade(history(True, True, True, True, infra=True))
    assert reward == -0.5


def test_no_tools_and_answer_only() -> None:
    messages = [{"role": "user", "content": "t"}, {"role": "assistant", "content": "42"}]
    reward, metrics = WorkspaceReward("42", WEIGHTS).grade(messages)
    assert reward == pytest.approx(0.1) and metrics["tool_called"] == 0.0
    assert WorkspaceReward("42", WEIGHTS, binary=True).grade(messages)[0] == 0.0


def test_foreign_tool_messages_are_ignored() -> None:
    messages = [
        {"role": "tool", "content": "not json"},
        {"role": "tool", "content": json.dumps({"schema": "other", "tool": "write", "status": "ok"})},
        {"role": "assistant", "content": "0"},
    ]
    _, metrics = WorkspaceReward("42", WEIGHTS).grade(messages)
    assert metrics["tool_called"] == 0.0 and metrics["mutation_succeeded"] == 0.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 42.", "42"),
        ("-17", "-17"),
        ("x1 y2 3", "3"),
        ("value42 is 7", "7"),
        ("answer: 12 then 13", "13"),
        ("no number", None),
        ("3.5", "5"),
        ("-0", "-0"),
    ],
)
def test_final_answer_is_the_last_integer_of_the_last_assistant_message(text: str, expected: str | None) -> None:
    messages = [
        {"role": "assistant", "content": "99"},
        {"role": "user", "content": "7"},
        {"role": "assistant", "content": text},
    ]
    assert final_answer(messages) == expected


def test_empty_final_answer_earns_no_answer_credit() -> None:
    messages = history(True, True, True, False)
    messages[-1] = {"role": "assistant", "content": ""}
    reward, metrics = WorkspaceReward("42", WEIGHTS).grade(messages)
    assert metrics["response_answer_correct"] == 0.0 and reward == pytest.approx(0.9)
