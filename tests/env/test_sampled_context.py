"""An observation continues the tokens the model saw and sampled, so an episode trains as
one sequence; where the renderer rewrites its history, the canonical rendering stands."""

from __future__ import annotations

import asyncio
import json

import pytest
from tinker_cookbook.renderers.base import ToolCall
from tinker_cookbook.rl.data_processing import trajectory_to_data
from tinker_cookbook.rl.rollouts import do_group_rollout

from piexp.config.defaults import default_settings
from piexp.config.schema import LanguageSettings, Limits, RewardSettings
from piexp.env.episode import EpisodeSettings, WorkspaceGroupBuilder, build_workspace_env, get_run_renderer
from piexp.env.sampled_context import spliced_observation
from piexp.policies import make_policy
from piexp.policies.scripted import render_assistant_tokens
from piexp.tasks import Task, build_tasks

PYTHON = LanguageSettings(runtimes=["python", "python3"], filename="solution.py")
INSTRUCT = ("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507")
THINKING = ("qwen3", "Qwen/Qwen3-8B")
TASK = Task(task_id="t", family="arith", split="train", instruction="Sum a.txt.", files={"a.txt": "1\n2\n"}, answer="3")


def _settings(url: str = "http://127.0.0.1:9/run_code", renderer: tuple[str, str] = INSTRUCT) -> EpisodeSettings:
    return EpisodeSettings(
        model_name=renderer[1],
        renderer_name=renderer[0],
        languages={"python": PYTHON},
        limits=default_settings("limits", Limits),
        reward=default_settings("reward", RewardSettings),
        sandbox_url=url,
    )


def _read(text: str, *paths: str) -> dict:
    calls = [
        ToolCall(function=ToolCall.FunctionBody(name="read", arguments=json.dumps({"path": p})), id=f"call_{i}")
        for i, p in enumerate(paths)
    ]
    return {"role": "assistant", "content": text, "tool_calls": calls}


async def _episode(renderer_names: tuple[str, str], actions) -> tuple[list, list, list]:
    """Observations, actions and canonical renderings of an episode whose turns are the
    actions `actions(renderer, stop)` yields."""
    renderer = get_run_renderer(*renderer_names)
    env = build_workspace_env(
        task=TASK, language="python", settings=_settings(renderer=renderer_names), renderer=renderer, evaluation=True
    )
    observation, stop = await env.initial_observation()
    observations, taken, canonical = [observation.to_ints()], [], []
    for action in actions(renderer, stop):
        result = await env.step(action)
        observations.append(result.next_observation.to_ints())
        taken.append(list(action))
        canonical.append(renderer.build_generation_prompt(env.message_env.history).to_ints())
    return observations, taken, canonical


def test_a_turn_with_text_before_its_tool_calls_is_seen_as_sampled() -> None:
    # The cookbook's Qwen3 parse keeps the newline the renderer writes before
    # `<tool_call>` and between calls, and the renderer writes them again: the
    # canonical history is not what was sampled.
    def actions(renderer, stop):
        yield render_assistant_tokens(renderer, _read("Reading the input first.", "a.txt", "a.txt"), stop)
        yield render_assistant_tokens(renderer, _read("Once more.", "a.txt"), stop)

    observations, taken, canonical = asyncio.run(_episode(INSTRUCT, actions))
    for before, action, after, rewritten in zip(observations[:-1], taken, observations[1:], canonical, strict=True):
        assert after[: len(before) + len(action)] == before + action
        assert rewritten[: len(before) + len(action)] != before + action  # the splice changed something
        # What follows the sampled turn is the canonical rendering's own tail.
        tail = after[len(before) + len(action) :]
        assert rewritten[-len(tail) :] == tail


def test_a_sampled_tokenization_the_tokenizer_would_not_choose_is_kept() -> None:
    def actions(renderer, stop):
        canonical = render_assistant_tokens(renderer, _read("", "a.txt"), stop)
        text = renderer.tokenizer.decode(canonical[:-1])
        # The same text, one token per character where a character is a token of its own.
        split = [t for ch in text for t in renderer.tokenizer.encode(ch, add_special_tokens=False)]
        assert renderer.tokenizer.decode(split) == text and split != canonical[:-1]
        yield [*split, canonical[-1]]

    observations, taken, canonical = asyncio.run(_episode(INSTRUCT, actions))
    assert observations[1][: len(observations[0]) + len(taken[0])] == observations[0] + taken[0]
    assert canonical[0] != observations[1]


def test_a_renderer_that_rewrites_its_history_keeps_the_canonical_rendering() -> None:
    # Qwen3 with thinking drops earlier turns' reasoning from the history: the sampled
    # turn is not a prefix of any rendering of the conversation, so nothing is spliced.
    def actions(renderer, stop):
        message = _read("", "a.txt")
        message["content"] = [{"type": "thinking", "thinking": "The file is small."}]
        yield render_assistant_tokens(renderer, message, stop)

    observations, taken, canonical = asyncio.run(_episode(THINKING, actions))
    assert observations[1] == canonical[0]
    assert observations[1][: len(observations[0]) + len(taken[0])] != observations[0] + taken[0]


def test_an_action_without_a_stop_token_is_not_spliced() -> None:
    renderer = get_run_renderer(*INSTRUCT)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    rendered = renderer.build_generation_prompt(messages)
    seen = renderer.build_generation_prompt(messages[:1])
    action = renderer.tokenizer.encode("hello", add_special_tokens=False)
    assert spliced_observation(renderer, messages, rendered, seen, action) is None
    stopped = spliced_observation(renderer, messages, rendered, seen, [*action, renderer.get_stop_sequences()[0]])
    assert stopped is not None and stopped.to_ints()[: len(seen.to_ints())] == seen.to_ints()


@pytest.mark.parametrize("policy_name", ["oracle", "crash"])
def test_scripted_episodes_train_as_one_sequence(policy_name: str, sandbox_url: str) -> None:
    tasks = build_tasks("train", 1, 0, ["json_tree", "csv_agg"])
    renderer = get_run_renderer(*INSTRUCT)
    policy = make_policy(policy_name, renderer, tasks)
    settings = _settings(sandbox_url)
    for task in tasks:
        builder = WorkspaceGroupBuilder(task=task, language="python", settings=settings, group_size=1)
        trajectory = asyncio.run(do_group_rollout(builder, policy)).trajectories_G[0]
        assert len(trajectory.transitions) >= 2
        (datum,) = trajectory_to_data(trajectory, 1.0)
        last = trajectory.transitions[-1]
        # The one sequence is the last observation and action: every turn once.
        assert datum.model_input.length == last.ob.length + len(last.ac.tokens) - 1
        trained = sum(tr.ob.length + len(tr.ac.tokens) for tr in trajectory.transitions)
        assert datum.model_input.length < trained / 1.5
