"""A small training run's records, played through the train dataset piexp gives the
cookbook (`cookbook_config(...).dataset_builder()`, every control on), by a labelled TEST
FIXTURE in place of a model: each group's episodes pass or fail by the group's task and
step, with varied shaped rewards. The run stops after its fifth step and a fresh dataset
resumes it at step 3, as a restarted process does from a checkpoint. What it returns is
everything the run hands the cookbook and leaves in its run folder: the batches, each
group's rewards and metrics, the step metrics, `group_outcomes.jsonl`, the gate's
decisions and the training transcripts. `tests/env/test_training_records.py` compares it
with `fixtures/training_records.json`, this function's result on the code before the
chain was rebuilt (`python -m tests.env.training_records` writes it)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.types import EnvGroupBuilder, Trajectory, Transition

from piexp.config.compose import load
from piexp.env.group_outcomes import workspace_group
from piexp.env.task_sampler import TrainingControls
from piexp.files import read_jsonl
from piexp.launch.train import cookbook_config
from piexp.launch.train_transcripts import TrainRecorder
from piexp.transcripts.store import TRAIN_TRANSCRIPTS, read_transcripts

SANDBOX = "http://127.0.0.1:1/run_code"  # never called: the fixture grades without running programs
FIXTURE = Path(__file__).parent / "fixtures" / "training_records.json"
COMMON = ["family=[arith,dates]", "lang=python", "tasks.train_per_family=4", "tasks.eval_per_family=1"]
COMMON += ["mode.group_size=3", "mode.groups_per_batch=3", "mode.max_steps=6"]
RUNS = {
    # Every control: outcome-driven sampling, the gate, the shuffled control, records.
    "pools_gate_shuffled": ["tasks.pools.enabled=true", "algo.binary_gate=true", "algo.shuffle_rewards=true"],
    # No sampler: the batches do not depend on outcomes, the records still do.
    "weighted_gate": ["tasks.family_weights={arith:2,dates:1}", "algo.binary_gate=true"],
    "plain": [],
}
#: Transcript fields that do not depend on when or how fast the run went.
TRANSCRIPT_FIELDS = ("iteration", "group", "sample", "task_id", "language", "policy", "trained_reward", "reward")


def _fixture_trajectories(task_id: str, step: int, size: int) -> list[Trajectory]:
    """TEST FIXTURE standing in for a model's episodes: how many of `size` pass follows
    the task and the step (so pools move and the gate sees all-equal and mixed groups);
    the rest fail with varied shaped rewards."""
    passes = (sum(map(ord, task_id)) + step) % (size + 1)
    ob = tinker.ModelInput.from_ints([1, 2, 3])
    action = TokensWithLogprobs(tokens=[4, 5], maybe_logprobs=[0.0, 0.0])
    return [
        Trajectory(
            transitions=[
                Transition(ob=ob, ac=action, reward=0.05 * i, episode_done=False),
                Transition(
                    ob=ob,
                    ac=action,
                    reward=1.0 if i < passes else 0.1 * (i + 1),
                    episode_done=True,
                    metrics={"functional_correct": float(i < passes)},
                ),
            ],
            final_ob=ob,
        )
        for i in range(size)
    ]


def _play(run_dir: Path, overrides: list[str], steps: range) -> dict[str, Any]:
    config = load(["mode=train", *COMMON, *overrides])
    size = config.mode.group_size  # type: ignore[union-attr]

    async def grade(step: int, builder: EnvGroupBuilder) -> list[Any]:
        envs = await builder.make_envs()
        trajectories = _fixture_trajectories(workspace_group(builder).task.task_id, step, size)
        rewards = await builder.compute_group_rewards(trajectories, envs)
        return [[round(total, 9), {k: round(v, 9) for k, v in sorted(metrics.items())}] for total, metrics in rewards]

    async def play() -> dict[str, Any]:
        train, _ = await cookbook_config(config, run_dir, SANDBOX).dataset_builder()
        played: dict[str, Any] = {"batches": {}, "rewards": {}, "step_metrics": {}}
        for step in steps:
            batch = train.get_batch(step)
            played["batches"][step] = [workspace_group(builder).task.task_id for builder in batch]
            played["rewards"][step] = await asyncio.gather(*(grade(step, builder) for builder in batch))
            controls = TrainingControls.of(str(run_dir))
            assert controls is not None
            played["step_metrics"][step] = {k: round(v, 9) for k, v in sorted(controls.step_metrics(step).items())}
        return played

    try:
        return asyncio.run(play())
    finally:
        TrainRecorder.close(str(run_dir / TRAIN_TRANSCRIPTS))
        TrainingControls.forget(str(run_dir))


def _records(run_dir: Path) -> dict[str, Any]:
    """What the run folder holds: its group records, the gate's decisions as `gate_steps`
    reads them, and the transcripts' stable fields."""
    from piexp.env.binary_gate import gate_steps

    outcomes = run_dir / "group_outcomes.jsonl"
    gate = run_dir / "binary_gate.jsonl"
    return {
        "group_outcomes": list(read_jsonl(outcomes)) if outcomes.exists() else [],
        "binary_gate": list(read_jsonl(gate)) if gate.exists() else [],
        "gate_steps": gate_steps(run_dir),
        "transcripts": [
            {name: t.get(name) for name in TRANSCRIPT_FIELDS} for t in read_transcripts(run_dir / TRAIN_TRANSCRIPTS)
        ],
    }


def training_records(root: Path) -> dict[str, Any]:
    """Each of `RUNS` played for steps 0-4, then resumed at step 3 and played to its end."""
    results = {}
    for name, overrides in RUNS.items():
        run_dir = root / name
        run_dir.mkdir(parents=True)
        first = _play(run_dir, overrides, range(5))
        resumed = _play(run_dir, overrides, range(3, 6))
        results[name] = {"first": first, "resumed": resumed, "records": _records(run_dir)}
    return json.loads(json.dumps(results))  # keys as the fixture file holds them


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        records = training_records(Path(scratch))
    FIXTURE.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)", file=sys.stderr)
