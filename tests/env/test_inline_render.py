"""WorkspaceEnv renders turns with little new text on the loop and big ones in a thread,
and the observations are exactly the cookbook renderer's either way."""

from __future__ import annotations

import asyncio
import json

import pytest
from tinker_cookbook.renderers.base import ToolCall
from tinker_cookbook.rl import message_env

from piexp.config.schema import LanguageSettings, Limits, RewardSettings
from piexp.env.episode import EpisodeSettings, WorkspaceEnv, build_workspace_env, get_run_renderer
from piexp.policies.scripted import render_assistant_tokens
from piexp.tasks import Task

PYTHON = LanguageSettings(runtimes=["python", "python3"], filename="solution.py", sandbox_language="python")


def _settings() -> EpisodeSettings:
    return EpisodeSettings(
        model_name="Qwen/Qwen3-4B-Instruct-2507", renderer_name="qwen3_instruct", languages={"python": PYTHON},
        limits=Limits(), reward=RewardSettings(), sandbox_url="http://127.0.0.1:9/run_code",
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


def test_small_turns_inline_big_turns_in_a_thread(thread_hops: list[int]) -> None:
    big = "x" * (WorkspaceEnv.inline_render_chars + 1)
    task = Task(task_id="t", family="arith", split="train", instruction="Sum small.txt.",
                files={"small.txt": "1\n2\n", "big.txt": big}, answer="3")
    renderer = get_run_renderer("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507")
    env = build_workspace_env(task=task, language="python", settings=_settings(), renderer=renderer, evaluation=True)
    assert isinstance(env, WorkspaceEnv)

    async def episode() -> list[int]:
        hops_per_render = []
        observation, stop = await env.initial_observation()
        history = env.message_env.history
        assert observation.to_ints() == renderer.build_generation_prompt(history).to_ints()
        hops_per_render.append(len(thread_hops))
        for path in ("small.txt", "big.txt", "small.txt"):
            result = await env.step(render_assistant_tokens(renderer, _read(path), stop))
            assert not result.episode_done
            assert result.next_observation.to_ints() == renderer.build_generation_prompt(history).to_ints()
            hops_per_render.append(len(thread_hops))
        return hops_per_render

    # The prompt and the small reads render inline; only the turn that adds the big
    # file's text goes to a thread.
    assert asyncio.run(episode()) == [0, 0, 1, 1]
