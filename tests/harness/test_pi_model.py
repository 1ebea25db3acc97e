"""The `model` policy through Pi: Pi's requests (its system prompt, its tools, the
history) are rendered with the run's renderer, sampled from the run's service
(`service=local model=tiny-local`, offline) and parsed back into Pi's tool calls; every
call's prompt and sampled tokens and logprobs are recorded in the episode's transcript."""

from __future__ import annotations

import gzip
import json

import pytest

from piexp.env.episode import get_run_renderer
from piexp.harness.pi.model import SampledCall, assistant_message, render_request, sequence_splits
from piexp.harness.pi.scripted import ScriptedResponder
from piexp.policies import make_policy
from piexp.policies.scripted import render_assistant_tokens
from tests.harness.conftest import MODEL, episode_settings, play_all, requires_pi
from tests.harness.test_pi_runs import piexp

pytestmark = requires_pi


def test_the_model_policy_plays_through_pi_on_the_local_service(tmp_path):
    """Two episodes of the random-weight tiny-local model (the local server's start-up
    dominates: 21 s to 31 s here, once its venv is in piexp's cache)."""
    run_dir = tmp_path / "model"
    done = piexp("mode=eval", "harness=pi", "policy=model", "service=local", "model=tiny-local", "family=arith",
                 "lang=python", "tasks.eval_per_family=2", "limits.max_generation_tokens=48", "mode.preflight=false",
                 f"hydra.run.dir={run_dir}", timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["overall"]["episodes"] == 2 and results["episodes_failed_to_run"] == 0
    with gzip.open(run_dir / "transcripts.jsonl.gz", "rt") as f:
        transcripts = [json.loads(line) for line in f]
    assert len(transcripts) == 2
    for transcript in transcripts:
        assert transcript["harness"] == "pi" and transcript["turns"]
        first = transcript["turns"][0]
        # Pi's system prompt and its four tools rendered: well over a thousand tokens.
        assert first["prompt_tokens"] > 1000
        assert 0 < first["sampled_tokens"] <= 48 and first["sampled_logprob"] < 0
        assert transcript["tokens"]["sampled"] == sum(t["sampled_tokens"] for t in transcript["turns"])
        assert 0 <= transcript["tokens"]["splits"] < len(transcript["turns"])  # at most one per later call
        # Every sampled turn is in the conversation, the ones Pi never got included (a turn
        # cut at the generation limit ends the episode before Pi sees it).
        said = [m for m in transcript["conversation"] if m["role"] == "assistant"]
        assert len(said) == len(transcript["turns"]) and transcript["prompt"][0]["role"] == "system"
        if transcript["stop_reason"] == "max_tokens":
            assert "Pi never saw this turn" in said[-1]["text"]


def test_a_call_that_does_not_extend_the_last_one_counts_as_a_split():
    """The split count compares each call's prompt with the previous prompt plus what was
    sampled after it, token for token."""
    first = SampledCall(prompt_tokens=[1, 2, 3], sampled_tokens=[4, 5], logprobs=[-0.1, -0.2], stop_reason="stop")
    extends = SampledCall(prompt_tokens=[1, 2, 3, 4, 5, 9, 9], sampled_tokens=[6], logprobs=[-0.3], stop_reason="stop")
    rerendered = SampledCall(prompt_tokens=[1, 2, 3, 4, 7, 9], sampled_tokens=[8], logprobs=[-0.4], stop_reason="stop")
    assert sequence_splits([first, extends]) == 0
    assert sequence_splits([first, rerendered]) == 1
    assert sequence_splits([first, extends, rerendered]) == 1
    assert sequence_splits([first]) == 0


@pytest.mark.parametrize("renderer_name", ["qwen3_instruct", "qwen3"])
def test_pi_s_resent_history_re_renders_to_the_tokens_sampled(tasks, renderer_name):
    """Each of Pi's requests, rendered as the model policy renders it, starts with the
    previous request's tokens plus the tokens the model would have sampled for its answer
    (the scripted oracle and edit policies' answers rendered as a model emits them): Pi's
    history (its plain-text tool results, its tool-call ids, its `edits[]`) splits no
    sequence with either Qwen3 renderer."""
    renderer = get_run_renderer(renderer_name, "Qwen/Qwen3-8B" if renderer_name == "qwen3" else MODEL[1])

    def episode(policy_name):
        inner = ScriptedResponder(make_policy(policy_name, renderer, tasks))
        calls: list[SampledCall] = []

        async def respond(body):
            prompt = render_request(renderer, body).to_ints()
            answer = await inner(body)
            sampled = render_assistant_tokens(renderer, assistant_message(answer), renderer.get_stop_sequences())
            calls.append(SampledCall(prompt, sampled, None, "stop"))
            return answer

        return calls, lambda h: h.play_responder(respond, policy_name, tasks[2], "python", episode_settings())

    (oracle_calls, oracle), (edit_calls, edit) = episode("oracle"), episode("edit")
    records = play_all([oracle, edit])
    assert [r.reward for r in records] == [1.0, 1.0]
    assert (len(oracle_calls), len(edit_calls)) == (4, 6)
    assert sequence_splits(oracle_calls) == 0 and sequence_splits(edit_calls) == 0


class CompactToolCalls:
    """Test fixture standing in for a model that writes its tool calls in a form of its
    own: text before the call and JSON without spaces, which the renderer parses but
    re-renders to other tokens (its canonical `{"name": ..., "arguments": ...}`). Its
    turns: write the task's reference program, run it, state the answer; `shown` keeps
    every prompt."""

    def __init__(self, renderer, task):
        from piexp.tasks import task_reference

        self.renderer = renderer
        self.shown: list[list[int]] = []
        program = task_reference(task, "python")
        self.texts = [
            "Writing it.\n<tool_call>\n" + json.dumps({"name": "write", "arguments": {"path": "solution.py", "content": program}}, separators=(",", ":")) + "\n</tool_call>",
            "Running it.\n<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": "python solution.py"}}, separators=(",", ":")) + "\n</tool_call>",
            f"The answer is {task.answer}.",
        ]  # fmt: skip

    async def __call__(self, model_input, stop, **_):
        from tinker_cookbook.completers import TokensWithLogprobs

        self.shown.append(model_input.to_ints())
        text = self.texts[min(len(self.shown), len(self.texts)) - 1]
        tokens = self.renderer.tokenizer.encode(text, add_special_tokens=False) + [stop[0]]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[-0.5] * len(tokens))


def test_a_sampled_turn_in_a_form_of_the_model_s_own_stays_verbatim_in_its_context(tasks):
    """The model's earlier turns stay in its context as it sampled them, not as Pi's
    re-sent history re-renders them: each observation extends the previous observation
    plus the sampled tokens (no sequence split), the episode passes, and the same
    requests rendered afresh would have split at every later call (the control: the
    fixture's turns are not the renderer's canonical form)."""
    from piexp.harness.pi.model import ModelResponder
    from piexp.harness.pi.scoring import scoring_rule

    renderer = get_run_renderer(*MODEL)
    task = tasks[0]
    fixture = CompactToolCalls(renderer, task)
    settings = episode_settings()
    responder = ModelResponder(fixture, renderer, settings.limits, scoring_rule(settings))
    requests = []

    async def respond(body):
        requests.append(body)
        return await responder(body)

    (record,) = play_all([lambda h: h.play_responder(respond, "model", task, "python", settings)])
    assert record.reward == 1.0 and len(responder.calls) == 3
    assert sequence_splits(responder.calls) == 0
    assert [call.prompt_tokens for call in responder.calls] == fixture.shown
    rendered_afresh = [
        SampledCall(render_request(renderer, body).to_ints(), call.sampled_tokens, None, "stop")
        for body, call in zip(requests, responder.calls)
    ]
    assert sequence_splits(rendered_afresh) == 2
