"""Training in the real Pi: a Pi episode is a tinker-cookbook `Env` (piexp.harness.pi.env)
that the cookbook's own rollout and data code step and turn into training sequences, and
`mode=train harness=pi` trains `service=local model=tiny-local` offline.

The token-exact tests stand a labelled fixture in for the model (`SolvingFixture`): a
`TokenCompleter` that emits, as a model would, the tokens of three fixed assistant turns
(write the reference program, run it, state the answer); everything else is real: Pi,
its sandbox, the renderer, `do_group_rollout` and `trajectory_to_data`."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
import tinker
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs
from tinker_cookbook.renderers.base import Message, ToolCall
from tinker_cookbook.rl.data_processing import trajectory_to_data
from tinker_cookbook.rl.rollouts import do_group_rollout

from piexp.env.episode import InfrastructureFailure, WorkspaceGroupBuilder, get_run_renderer
from piexp.harness.base import make_harness
from piexp.harness.pi.env import PiEpisodeEnv, scripted_trajectory
from piexp.policies import make_policy
from piexp.policies.scripted import render_assistant_tokens
from piexp.tasks import task_reference
from tests.harness.conftest import MODEL, PI_SETTINGS, episode_settings, pi_settings, requires_pi
from tests.job_launcher import run_piexp

pytestmark = requires_pi


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(function=ToolCall.FunctionBody(name=name, arguments=json.dumps(arguments)), id=f"call_{name}")


class SolvingFixture(TokenCompleter):
    """Test fixture standing in for a model: whatever it is shown, it emits the tokens
    of its next scripted turn (the task's reference program written, run, the answer
    stated; which one by the assistant turns in its prompt), with a made-up logprob per
    token; `shown` and `emitted` keep every prompt and action, in order."""

    def __init__(self, renderer: Any, turns: list[Message]) -> None:
        self.renderer = renderer
        self.turns = list(turns)
        self.emitted: list[list[int]] = []
        self.shown: list[list[int]] = []

    async def __call__(self, model_input: tinker.ModelInput, stop: Any, **_: Any) -> TokensWithLogprobs:
        self.shown.append(model_input.to_ints())
        # Its turns so far in this episode: the assistant turns the prompt holds (the
        # generation prompt ends with one more header).
        done = self.renderer.tokenizer.decode(model_input.to_ints()).count("<|im_start|>assistant") - 1
        message = self.turns[min(done, len(self.turns) - 1)]
        tokens = render_assistant_tokens(self.renderer, message, self.renderer.get_stop_sequences())
        self.emitted.append(tokens)
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[-0.5] * len(tokens))


def _solving_turns(task: Any) -> list[Message]:
    program = task_reference(task, "python")
    return [
        Message(role="assistant", content="", tool_calls=[_call("write", path="solution.py", content=program)]),
        Message(role="assistant", content="", tool_calls=[_call("bash", command="python solution.py")]),
        Message(role="assistant", content=f"The answer is {task.answer}."),
    ]


def _rollout(policy_turns, task, settings, *, group_size: int = 1):
    """One group through the cookbook's `do_group_rollout`, its episodes Pi's."""
    renderer = get_run_renderer(*MODEL)

    async def main():
        harness = make_harness(PI_SETTINGS)
        try:
            builder = WorkspaceGroupBuilder(
                task=task, language="python", settings=settings, group_size=group_size,
                episode_env=harness.training_env,
            )  # fmt: skip
            policy = SolvingFixture(renderer, policy_turns(task))
            return await do_group_rollout(builder, policy), policy
        finally:
            await harness.aclose()

    return asyncio.run(main())


def test_a_pi_episode_trains_on_exactly_the_tokens_the_model_sampled(tasks):
    """Each observation is Pi's request as the renderer writes it (its system prompt and
    tools, then the history), each action the fixture's tokens; the episode ends with
    the graded reward (full marks: the program was written, run, printed the answer, the
    answer stated), and the cookbook's training data weight exactly the sampled tokens,
    with their logprobs, and nothing else."""
    task = tasks[0]
    group, policy = _rollout(_solving_turns, task, episode_settings())
    (trajectory,) = group.trajectories_G
    assert [t.ac.tokens for t in trajectory.transitions] == policy.emitted and len(policy.emitted) == 3
    assert [t.ob.to_ints() for t in trajectory.transitions] == policy.shown
    final = trajectory.transitions[-1]
    assert final.episode_done and final.reward == pytest.approx(1.0)
    assert final.metrics["passed"] == 1.0 and final.metrics["functional_correct"] == 1.0
    renderer = get_run_renderer(*MODEL)
    first = renderer.tokenizer.decode(policy.shown[0])
    assert task.instruction[:60] in first and "solution.py" in first
    assert '"name": "edit"' in first or "edit" in first  # Pi's own tools rendered into the prompt

    datums = trajectory_to_data(trajectory, 1.0)
    # A sequence starts anew only where Pi's re-sent history is not the previous
    # observation plus the action, and the env counts those places.
    assert len(datums) == 1 + int(final.metrics["sequence_splits"])
    trained, logprobs = [], []
    for datum in datums:
        targets = datum.loss_fn_inputs["target_tokens"].tolist()
        mask = datum.loss_fn_inputs["mask"].tolist()
        trained += [token for token, weight in zip(targets, mask) if weight > 0]
        logprobs += [lp for lp, weight in zip(datum.loss_fn_inputs["logprobs"].tolist(), mask) if weight > 0]
    assert trained == [token for action in policy.emitted for token in action]
    assert logprobs == pytest.approx([-0.5] * len(trained))


def test_the_episode_s_turns_stop_at_the_limit_and_are_graded(tasks):
    """A model that never states an answer is stopped at `limits.max_turns`: Pi's next
    request is refused, Pi ends, and the episode is graded with what it did (it wrote and
    ran the program: partial credit, no pass)."""
    task = tasks[0]

    def looping(task):
        write, run, _ = _solving_turns(task)
        return [write, run, run, run, run]

    group, policy = _rollout(looping, task, episode_settings(max_turns=3))
    (trajectory,) = group.trajectories_G
    assert len(trajectory.transitions) == 3 == len(policy.emitted)
    final = trajectory.transitions[-1]
    assert final.episode_done and final.metrics["passed"] == 0.0
    assert 0.0 < final.reward < 1.0  # mutation, execution and output earned; no answer


def test_a_group_s_episodes_are_graded_apart(tasks):
    """Two episodes of one group, each its own Pi in its own workspace, both full marks."""
    group, policy = _rollout(_solving_turns, tasks[1], episode_settings(), group_size=2)
    assert [t.transitions[-1].reward for t in group.trajectories_G] == pytest.approx([1.0, 1.0])


def test_the_warm_start_s_imitation_data_are_pi_episodes(tasks):
    """The oracle played through Pi as a trajectory: Pi's prompts as observations, the
    oracle's answers as the tokens a model emits, full marks."""
    renderer = get_run_renderer(*MODEL)
    policy = make_policy("oracle", renderer, tasks)

    async def main():
        harness = make_harness(PI_SETTINGS)
        try:
            return await scripted_trajectory(harness, policy, tasks[0], "python", episode_settings(), renderer)
        finally:
            await harness.aclose()

    trajectory, reward = asyncio.run(main())
    assert reward == pytest.approx(1.0) and len(trajectory.transitions) == 4
    assert trajectory.transitions[-1].episode_done
    assert "solution.py" in renderer.tokenizer.decode(trajectory.transitions[0].ob.to_ints())


def test_pi_ending_before_any_model_call_is_infrastructure(tasks):
    """A Pi that cannot start (here: its wall-time limit below node's start-up, set on
    the built harness as a fault: a run refuses such an option before it starts) is
    piexp's failure, raised for the rollout strategy to retry or mask, never an episode
    scored 0."""
    renderer = get_run_renderer(*MODEL)

    async def main():
        harness = make_harness(pi_settings(warm=False))
        harness.options = harness.options.model_copy(update={"wall_time_s": 0.01})
        try:
            env = harness.training_env(tasks[0], "python", episode_settings(), renderer, evaluation=False)
            assert isinstance(env, PiEpisodeEnv)
            await env.initial_observation()
        finally:
            await harness.aclose()

    with pytest.raises(InfrastructureFailure):
        asyncio.run(main())


@pytest.mark.slow
def test_training_in_pi_on_the_local_service(tmp_path: Path):
    """Slow (about 2 minutes on 2 cores, once the server venv is in piexp's cache):
    `mode=train harness=pi` warm-starts tiny-local on the oracle played through Pi, then
    trains two RL steps whose episodes, and the eval split's, are Pi's; the training
    transcripts are Pi's, with each turn's sampled tokens, the step metrics count the
    sequence splits, and `show --step first|last` lists each step's episodes."""
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    done = run_piexp(
        "service=local",
        "model=tiny-local",
        "harness=pi",
        "family=arith",
        "lang=python",
        "tasks.train_per_family=2",
        "tasks.eval_per_family=1",
        "mode.group_size=2",
        "mode.groups_per_batch=1",
        "mode.save_every=1",
        "mode.eval_every=1",
        "mode.preflight=false",
        "limits.max_turns=4",
        "limits.max_generation_tokens=512",
        "warm_start.sft_steps=1",
        "warm_start.tasks=1",
        "harness.options.wall_time_s=600",
        "mode.max_steps=2",
        f"hydra.run.dir={run_dir}",
        env=env,
        timeout=1500,
    )
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [row for row in rows if "env/all/reward/total" in row]
    assert len(steps) == 2
    assert all("env/all/sequence_splits" in row for row in steps)
    # The eval split is played in Pi too, its pass rate the binary one.
    assert any(row.get("test/env/all/passed") is not None for row in rows)
    warm = json.loads((run_dir / "warm_start.json").read_text())
    assert warm["state_path"] and warm["episodes"] == 1
    with gzip.open(run_dir / "train_transcripts.jsonl.gz", "rt") as f:
        transcripts = [json.loads(line) for line in f]
    assert len(transcripts) == 4 and {t["harness"] for t in transcripts} == {"pi"}
    for transcript in transcripts:
        assert transcript["turns"] and all(turn["sampled_tokens"] > 0 for turn in transcript["turns"])
        assert transcript["tokens"]["sampled"] == sum(turn["sampled_tokens"] for turn in transcript["turns"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["harness"]["name"] == "pi"
    # `show` narrows the run to its first and last steps' episodes, and opens one of them.
    for step, number in (("first", 0), ("last", 1)):
        listed = _show(run_dir, "--source", "train", "--step", step, "--json")
        assert [row["iteration"] for row in json.loads(listed)] == [number, number]
    opened = _show(run_dir, "--source", "train", "--step", "last", "0")
    assert "train step 1 model " in opened and "harness pi" in opened
    beyond = run_piexp("show", str(run_dir), "--step", "2", timeout=120)
    assert beyond.returncode == 2 and "of steps 0 to 1" in beyond.stderr and "Traceback" not in beyond.stderr


def _show(run_dir: Path, *args: str) -> str:
    done = run_piexp("show", str(run_dir), *args, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
