"""`show RUN --atif DIR` writes each listed episode as an ATIF trajectory that Harbor 0.25.0's
schema accepts (tests/harbor/atif_rules.py, every field and rule of its models; with
HARBOR_PYTHON naming a Python 3.12 with `harbor`, Harbor's own Trajectory model too): the
system and user prompts, one agent step per turn with its tool calls and the results linked
to them by id, token counts (and token ids and logprobs where recorded), and piexp's
reward, step metrics and task digest in `extra.piexp`. The checker itself is shown to
reject each kind of broken trajectory, so a pass means something."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from piexp.harbor.atif import RunAgent, trajectory
from piexp.tasks import build_tasks
from tests.harbor.atif_rules import atif_errors
from tests.harbor.harbor_rules import HARBOR_PYTHON, NO_HARBOR
from tests.tasks.test_user_families import run_piexp

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["tasks.train_per_family=1", "tasks.eval_per_family=2"]


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("atif") / "run"
    result = run_piexp(
        ROOT, "mode=eval", "policy=oracle", "family=arith", "lang=python", *SMALL, f"hydra.run.dir={run}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run


def _load(folder: Path) -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))}


@pytest.mark.slow
def test_every_episode_of_a_run_becomes_a_valid_trajectory_with_linked_calls_and_piexps_reward(
    oracle_run: Path, tmp_path: Path
) -> None:
    """Plays a small oracle eval with its preflight check (about 40 s of sandboxed episodes)."""
    out = tmp_path / "atif"
    result = run_piexp(ROOT, "show", str(oracle_run), "--atif", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    files = _load(out)
    sources = {data["extra"]["piexp"]["source"] for data in files.values()}
    assert sources == {"eval", "check"} and len([n for n in files if n.startswith("eval-")]) == 2
    digests = {task.task_id: task.task_digest for task in build_tasks("eval", 2, 0, ["arith"])}
    for name, data in files.items():
        assert atif_errors(data) == [], name
        piexp = data["extra"]["piexp"]
        assert piexp["task_digest"] == digests[piexp["task_id"]], name
        assert {"reward", "metrics", "policy", "language"} <= set(piexp)
        assert data["agent"]["name"] == "piexp-builtin" and data["agent"]["model_name"] == f"scripted:{piexp['policy']}"
        assert [step["source"] for step in data["steps"][:2]] == ["system", "user"]
        agent_steps = [step for step in data["steps"] if step["source"] == "agent"]
        assert agent_steps and all(step["llm_call_count"] == 0 and "metrics" not in step for step in agent_steps)
    oracle = files["eval-oracle-eval-arith-0-00000-python-s0.json"]
    assert oracle["extra"]["piexp"]["reward"] == 1.0
    calls = [call for step in oracle["steps"] for call in step.get("tool_calls") or []]
    results = [result for step in oracle["steps"] for result in (step.get("observation") or {}).get("results", [])]
    assert {call["function_name"] for call in calls} >= {"read", "write", "bash"}
    assert sorted(r["source_call_id"] for r in results) == sorted(c["tool_call_id"] for c in calls)
    assert len({c["tool_call_id"] for c in calls}) == len(calls), "ids are unique"
    bash = next(r for r in results if r.get("extra", {}).get("tool") == "bash")
    assert json.loads(bash["content"])["stdout"].strip() == oracle["extra"]["piexp"]["expected"]

    none = tmp_path / "none"
    result = run_piexp(ROOT, "show", str(oracle_run), "--source", "eval", "--failed", "--atif", str(none))
    assert result.returncode == 0 and "wrote 0 ATIF trajectories" in result.stdout, result.stderr
    one = tmp_path / "one"
    result = run_piexp(ROOT, "show", str(oracle_run), "--source", "eval", "1", "--atif", str(one))
    assert result.returncode == 0, result.stderr
    assert [path.name for path in one.iterdir()] == ["eval-oracle-eval-arith-0-00001-python-s0.json"]
    result = run_piexp(ROOT, "show", str(oracle_run), "--source", "eval", "9", "--atif", str(tmp_path / "nine"))
    assert result.returncode == 2 and "There is no episode 9" in result.stderr and not (tmp_path / "nine").exists()


# A labelled stand-in for a model's episode: the transcript a policy=model run records,
# with the per-turn token ids and logprobs a run may carry.
MODEL_TRANSCRIPT: dict[str, Any] = {
    "version": 1, "policy": "model", "task_id": "eval-arith-0-00000", "family": "arith", "split": "eval",
    "language": "python", "sample": 0, "task_digest": "ab" * 32, "reward": 0.0, "shaped": 0.15,
    "metrics": {"mutation_succeeded": 1.0, "functional_correct": 0.0}, "answer": None, "expected": "42",
    "stop_reason": "max_turns",
    "prompt": [{"role": "system", "text": "tools"}, {"role": "user", "text": "Use python ..."}],
    "conversation": [
        {"role": "assistant", "text": "Let me write it.", "thinking": "plan",
         "tool_calls": [{"id": "c1", "name": "write", "arguments": {"path": "solution.py", "content": "print(1)"}},
                        {"id": None, "name": "bash", "arguments": "{not json"}]},
        {"role": "tool", "name": "write", "tool_call_id": "c1", "result": {"status": "ok"}},
        {"role": "tool", "name": "bash", "tool_call_id": "", "result": {"status": "error"}},
        {"role": "assistant", "text": "Done."},
    ],
    "turns": [
        {"turn": 0, "prompt_tokens": 5, "sampled_tokens": 3, "reward": 0.0, "prompt_token_ids": [1, 2, 3, 4, 5],
         "sampled_token_ids": [7, 8, 9], "sampled_logprobs": [-0.1, -0.2, -0.3]},
        {"turn": 1, "prompt_tokens": 9, "sampled_tokens": 2, "reward": 0.0},
    ],
}  # fmt: skip


def test_a_models_turns_carry_token_counts_ids_logprobs_and_reasoning() -> None:
    data = trajectory(MODEL_TRANSCRIPT, RunAgent("pi", "Qwen/Qwen3-4B", "0.1.0"), "eval", "run/one")
    assert atif_errors(data) == []
    assert data["agent"]["model_name"] == "Qwen/Qwen3-4B" and data["agent"]["name"] == "piexp-pi"
    first, second = (step for step in data["steps"] if step["source"] == "agent")
    assert first["reasoning_content"] == "plan" and first["llm_call_count"] == 1
    assert first["metrics"]["completion_token_ids"] == [7, 8, 9] and first["metrics"]["logprobs"] == [-0.1, -0.2, -0.3]
    assert first["metrics"]["prompt_token_ids"] == [1, 2, 3, 4, 5] and second["metrics"]["prompt_tokens"] == 9
    ids = [call["tool_call_id"] for call in first["tool_calls"]]
    assert ids[0] == "c1" and ids[1] and ids[1] != "c1"
    assert first["tool_calls"][1]["arguments"] == {} and first["tool_calls"][1]["extra"]["unparsed_arguments"]
    assert [r["source_call_id"] for r in first["observation"]["results"]] == ids
    assert data["final_metrics"] == {"total_steps": 4, "total_prompt_tokens": 14, "total_completion_tokens": 5}
    assert data["extra"]["piexp"]["task_digest"] == "ab" * 32 and data["extra"]["piexp"]["shaped"] == 0.15


def _broken(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    cases = {}

    def case(name: str, change: Any) -> None:
        copied = copy.deepcopy(data)
        change(copied)
        cases[name] = copied

    case("unknown root field", lambda d: d.update(score=1))
    case("unknown version", lambda d: d.update(schema_version="ATIF-v2.0"))
    case("no agent version", lambda d: d["agent"].pop("version"))
    case("no steps", lambda d: d.update(steps=[]))
    case("step ids not sequential", lambda d: d["steps"][1].update(step_id=5))
    case("bad source", lambda d: d["steps"][0].update(source="tool"))
    case("metrics on a user step", lambda d: d["steps"][1].update(metrics={"prompt_tokens": 1}))
    case("metrics without an llm call", lambda d: d["steps"][2].update(llm_call_count=0))
    case("dangling source_call_id", lambda d: d["steps"][2]["observation"]["results"][0].update(source_call_id="x"))
    case("arguments not an object", lambda d: d["steps"][2]["tool_calls"][0].update(arguments="x"))
    case("logprobs not numbers", lambda d: d["steps"][2]["metrics"].update(logprobs=["a"]))
    case("bad timestamp", lambda d: d["steps"][0].update(timestamp="yesterday"))
    case("negative total_steps", lambda d: d["final_metrics"].update(total_steps=-1))
    case("text part without text", lambda d: d["steps"][0].update(message=[{"type": "text"}]))
    return cases


def test_the_schema_checker_rejects_each_kind_of_broken_trajectory() -> None:
    data = trajectory(MODEL_TRANSCRIPT, RunAgent("pi", "m", "0.1.0"), "eval", "run/one")
    for name, broken in _broken(data).items():
        assert atif_errors(broken), f"the checker accepted: {name}"


@pytest.mark.skipif(HARBOR_PYTHON is None, reason=NO_HARBOR)
def test_harbors_own_trajectory_model_accepts_them_and_rejects_the_broken_ones(tmp_path: Path) -> None:
    data = trajectory(MODEL_TRANSCRIPT, RunAgent("pi", "m", "0.1.0"), "eval", "run/one")
    (tmp_path / "good.json").write_text(json.dumps(data))
    validate = [str(HARBOR_PYTHON), str(Path(__file__).parent / "harbor_validate.py"), "--trajectory"]
    result = subprocess.run([*validate, str(tmp_path / "good.json")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    for name, broken in _broken(data).items():
        (tmp_path / "bad.json").write_text(json.dumps(broken))
        result = subprocess.run([*validate, str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=120)
        assert result.returncode != 0, f"Harbor accepted: {name}"
