"""WorkspaceEnv renders on the loop what needs little tokenizing and the rest in a thread,
and the observations are exactly the cookbook renderer's either way."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from tinker_cookbook.renderers.base import ToolCall
from tinker_cookbook.rl import message_env

from piexp.config.defaults import default_settings
from piexp.config.schema import LanguageSettings, Limits, RewardSettings
from piexp.env.episode import EpisodeSettings, WorkspaceEnv, build_workspace_env, get_run_renderer
from piexp.policies.scripted import render_assistant_tokens
from piexp.tasks import Task

PYTHON = LanguageSettings(runtimes=["python", "python3"], filename="solution.py")


def _settings() -> EpisodeSettings:
    return EpisodeSettings(
        model_name="Qwen/Qwen3-4B-Instruct-2507",
        renderer_name="qwen3_instruct",
        languages={"python": PYTHON},
        limits=default_settings("limits", Limits),
        reward=default_settings("reward", RewardSettings),
        sandbox_url="http://127.0.0.1:9/run_code",
    )


def _read(path: str) -> dict:
    call = ToolCall(function=ToolCall.FunctionBody(name="read", arguments=json.dumps({"path": path})), id="call_0")
    return {"role": "assistant", "content": "", "tool_calls": [call]}


@pytest.fixture
def thread_hops(monkeypatch) -> list[int]:
    hops: list[int] = []
    real = asyncio.to_thread

    async def counting(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        hops.append(1)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(message_env.asyncio, "to_thread", counting)
    return hops


def test_memoised_renders_inline_new_text_in_a_thread(thread_hops: list[int]) -> None:
    big = "x" * (WorkspaceEnv.inline_encode_chars + 1)

    def new_task() -> Task:  # unique texts: new to the tokenizer's memo
        return Task(
            task_id="t",
            family="arith",
            split="train",
            instruction=f"Sum small.txt ({uuid.uuid4()}).",
            files={"small.txt": "1\n2\n", "big.txt": big + str(uuid.uuid4())},
            answer="3",
        )

    renderer = get_run_renderer("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507")

    async def episode(task: Task) -> list[int]:
        env = build_workspace_env(
            task=task, language="python", settings=_settings(), renderer=renderer, evaluation=True
        )
        assert isinstance(env, WorkspaceEnv)
        start = len(thread_hops)
        hops_per_render = []
        observation, stop = await env.initial_observation()
        history = env.message_env.history
        assert observation.to_ints() == renderer.build_generation_prompt(history).to_ints()
        hops_per_render.append(len(thread_hops) - start)
        for path in ("small.txt", "big.txt", "small.txt"):
            result = await env.step(render_assistant_tokens(renderer, _read(path), stop))
            assert not result.episode_done
            assert result.next_observation.to_ints() == renderer.build_generation_prompt(history).to_ints()
            hops_per_render.append(len(thread_hops) - start)
        return hops_per_render

    asyncio.run(episode(new_task()))  # the system prompt (tool specs) is now memoised
    task = new_task()
    # A new task: its prompt and the small file are little new text and render inline;
    # the big file's text is tokenized in a thread.
    assert asyncio.run(episode(task)) == [0, 0, 1, 1]
    # The same episode again: every text is in the memo, so nothing leaves the loop.
    assert asyncio.run(episode(task)) == [0, 0, 0, 0]
