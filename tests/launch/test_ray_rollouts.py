"""`rollouts=ray` on a real multi-node Ray cluster on this machine (ray.cluster_utils:
a head that plays nothing and two piexp nodes of one CPU each, with the `piexp_node`
resource), shared by the module's tests and shut down after them. Each run is the real
command line in a subprocess joining that cluster by its address."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

from tests.harness.conftest import requires_pi  # noqa: E402
from tests.job_launcher import run_piexp  # noqa: E402

pytestmark = pytest.mark.slow

NODE_RESOURCE = "piexp_node"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A head without the piexp resource (it plays nothing) and two piexp nodes."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


def piexp(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("TINKER_API_KEY", "RAY_ADDRESS")}
    return run_piexp(*args, env=env, timeout=timeout)


def transcripts(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as lines:
        return [json.loads(line) for line in lines if line.strip()]


EVAL = ["mode=eval", "family=arith", "lang=python", "tasks.eval_per_family=4", "mode.preflight=false"]


@pytest.mark.parametrize("policy", ["oracle", "wrong"])
def test_an_eval_on_ray_gives_the_local_pass_at_1(cluster: Cluster, tmp_path: Path, policy: str) -> None:
    """Slow (about 1 minute a policy on 2 cores, the cluster's start shared): a scripted
    policy's eval played on the cluster's nodes scores exactly as the same eval played in
    the run's process (each episode's outcome, not only the mean), and its transcripts
    say which node played each episode: both nodes, the head none."""
    results = {}
    for rollouts in ("local", "ray"):
        run_dir = tmp_path / rollouts
        extra = [f"rollouts.address={cluster.address}"] if rollouts == "ray" else []
        done = piexp(*EVAL, f"policy={policy}", f"rollouts={rollouts}", *extra, f"hydra.run.dir={run_dir}")
        assert done.returncode == 0, done.stderr[-3000:]
        results[rollouts] = json.loads((run_dir / "results.json").read_text())
    assert results["ray"]["overall"]["pass@1"] == results["local"]["overall"]["pass@1"]
    assert results["ray"]["overall"]["pass@1"] == (1.0 if policy == "oracle" else 0.0)
    assert results["ray"]["per_task"] == results["local"]["per_task"]
    nodes = {transcript["node"] for transcript in transcripts(tmp_path / "ray" / "transcripts.jsonl.gz")}
    assert len(nodes) == 2, nodes
    assert all("node" not in transcript for transcript in transcripts(tmp_path / "local" / "transcripts.jsonl.gz"))


@requires_pi
def test_an_eval_in_pi_on_ray_gives_the_local_pass_at_1(cluster: Cluster, tmp_path: Path) -> None:
    """Slow (about 1.5 minutes on 2 cores): the oracle's eval through Pi played on the
    cluster's nodes, several episodes on each node's warm Pi slot one after another,
    scores each episode as the same eval played in the run's process."""
    results = {}
    for rollouts in ("local", "ray"):
        run_dir = tmp_path / rollouts
        extra = [f"rollouts.address={cluster.address}"] if rollouts == "ray" else []
        six = [arg if not arg.startswith("tasks.eval_per_family=") else "tasks.eval_per_family=6" for arg in EVAL]
        done = piexp(*six, "harness=pi", "policy=oracle", f"rollouts={rollouts}", *extra,
                     f"hydra.run.dir={run_dir}")  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        results[rollouts] = json.loads((run_dir / "results.json").read_text())
    assert results["ray"]["overall"]["pass@1"] == results["local"]["overall"]["pass@1"] == 1.0
    assert results["ray"]["per_task"] == results["local"]["per_task"]
    played = transcripts(tmp_path / "ray" / "transcripts.jsonl.gz")
    assert len(played) == 6 and all(t["harness"] == "pi" and t["node"] for t in played)


def test_a_node_that_cannot_run_the_sandbox_is_refused_before_the_run(cluster: Cluster, tmp_path: Path) -> None:
    """Slow (about 15 s on 2 cores): a node whose sandbox cannot start (bubblewrap is not
    on its PATH) is refused before any episode, in one paragraph naming the node, what
    it lacks and the fix (`make setup` there), exit 2, the run folder left empty."""
    node = cluster.add_node(
        num_cpus=1, resources={"piexp_unfit": 1}, env_vars={"PATH": str(Path(sys.executable).parent)}
    )
    try:
        run_dir = tmp_path / "run"
        done = piexp(*EVAL, "policy=oracle", "rollouts=ray", f"rollouts.address={cluster.address}",
                     "rollouts.node_resource=piexp_unfit", f"hydra.run.dir={run_dir}")  # fmt: skip
    finally:
        cluster.remove_node(node)
    assert done.returncode == 2, done.stderr[-3000:]
    assert (
        "Ray node " in done.stderr
        and "cannot play this run's episodes: bubblewrap (bwrap) is not on its PATH" in done.stderr
    )
    assert "make setup" in done.stderr and "Traceback" not in done.stderr
    assert not run_dir.exists() or not list(run_dir.iterdir())


def test_a_node_that_does_not_answer_the_check_in_time_is_named_before_the_run(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Slow (about 15 s on 2 cores): nodes that have not answered the node check within
    `rollouts.node_check_timeout_s` (here far too short for a worker to start) stop the run
    before any episode with one paragraph naming them and the setting to raise, exit 2,
    no traceback, the run folder left empty."""
    run_dir = tmp_path / "run"
    done = piexp(*EVAL, "policy=oracle", "rollouts=ray", f"rollouts.address={cluster.address}",
                 "rollouts.node_check_timeout_s=0.001", f"hydra.run.dir={run_dir}")  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "did not answer piexp's node check within 0.001 s" in done.stderr, done.stderr[-3000:]
    assert "rollouts.node_check_timeout_s" in done.stderr and "Traceback" not in done.stderr
    assert not run_dir.exists() or not list(run_dir.iterdir())


def _playing_node(cluster: Cluster) -> Any:
    """A piexp node whose worker is playing a training group now (Ray titles a worker
    process by the task it runs), or None."""
    import psutil

    for node in cluster.worker_nodes:
        raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
        for child in raylet.children(recursive=True):
            try:
                if child.cmdline()[:1] and child.cmdline()[0].startswith("ray::play_group_on_node"):
                    return node
            except psutil.Error:
                continue
    return None


def _a_node_playing(cluster: Cluster, run: subprocess.Popen[str]) -> Any:
    """The first piexp node seen playing one of `run`'s groups; the test fails, with the
    run's stderr, if the run ends or 400 s pass first."""
    import time

    deadline = time.monotonic() + 400
    while run.poll() is None and time.monotonic() < deadline:
        node = _playing_node(cluster)
        if node is not None:
            return node
        time.sleep(0.5)
    run.kill()
    _, stderr = run.communicate()
    pytest.fail(f"no node was seen playing a group; the run (exit {run.returncode}) said: {stderr[-3000:]}")


TRAIN = [
    "service=local", "model=tiny-local", "family=arith", "lang=python", "tasks.train_per_family=4",
    "tasks.eval_per_family=1", "mode.group_size=2", "mode.groups_per_batch=2", "mode.save_every=1",
    "mode.eval_every=0", "mode.preflight=false", "limits.max_turns=2", "limits.max_generation_tokens=64",
    "mode.max_steps=2", "rollouts=ray",
]  # fmt: skip


def _train_killing_a_node(cluster: Cluster, run_dir: Path, *extra: str) -> tuple[int, str]:
    """The training run on the cluster, one piexp node SIGKILLed as it plays a group of
    step 0 (then replaced): the run's exit status and stderr."""

    env = {key: value for key, value in os.environ.items() if key not in ("TINKER_API_KEY", "RAY_ADDRESS")}
    command = [sys.executable, "-m", "piexp", *TRAIN, *extra, f"rollouts.address={cluster.address}",
               f"hydra.run.dir={run_dir}"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env) as run:
        victim = _a_node_playing(cluster, run)
        cluster.remove_node(victim, allow_graceful=False)  # SIGKILL to every process of the node
        try:
            _, stderr = run.communicate(timeout=600)
        finally:
            cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: 1})  # the module's cluster, whole again
    return run.returncode, stderr


def test_training_on_ray_survives_a_node_killed_mid_step(cluster: Cluster, tmp_path: Path) -> None:
    """Slow (about 2.5 minutes on 2 cores: the local server's start and two steps of
    tiny-local): `mode=train service=local model=tiny-local rollouts=ray` trains two
    steps on the cluster while one piexp node is SIGKILLed as it plays a group of step 0.
    The run finishes with complete records: every (step, group) graded and recorded
    exactly once, each episode's transcript once and naming its node, and the lost
    attempt counted in step 0's metrics (3 attempts for 2 groups), none in step 1's."""
    run_dir = tmp_path / "run"
    returncode, stderr = _train_killing_a_node(cluster, run_dir)
    assert returncode == 0, stderr[-4000:]
    outcomes = [json.loads(line) for line in (run_dir / "group_outcomes.jsonl").read_text().splitlines()]
    assert sorted((line["step"], line["group"]) for line in outcomes) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    played = transcripts(run_dir / "train_transcripts.jsonl.gz")
    positions = sorted((t["iteration"], t["group"], t["sample"]) for t in played)
    assert positions == [(step, group, sample) for step in (0, 1) for group in (0, 1) for sample in (0, 1)]
    assert all(t["node"] for t in played)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = {row["step"]: row for row in rows if "rollouts/attempts" in row}
    assert steps[0]["rollouts/groups"] == 2 and steps[0]["rollouts/attempts"] == 3
    assert steps[0]["rollouts/attempts_lost"] == 1 and steps[0]["rollouts/copies_dropped"] == 0
    assert steps[1]["rollouts/attempts"] == 2 and steps[1]["rollouts/attempts_lost"] == 0
    assert "was lost with its node; playing it again" in stderr


@pytest.mark.parametrize("rule", ["retry", "mask"])
def test_a_group_lost_past_its_retries_follows_the_infrastructure_rule(
    cluster: Cluster, tmp_path: Path, rule: str
) -> None:
    """Slow (about 1.5 minutes a rule on 2 cores): with `rollouts.group_retries=0`, a group
    whose only attempt dies with its node is never scored. `algo.infrastructure_errors=retry`
    stops the run with exit 4 and one paragraph saying the same command resumes it, the
    group unrecorded; `mask` drops the group, says so, and the run finishes with every
    other group recorded once."""
    run_dir = tmp_path / "run"
    returncode, stderr = _train_killing_a_node(
        cluster, run_dir, "rollouts.group_retries=0", f"algo.infrastructure_errors={rule}"
    )
    recorded_file = run_dir / "group_outcomes.jsonl"
    recorded = [json.loads(line) for line in recorded_file.read_text().splitlines()] if recorded_file.exists() else []
    keys = [(line["step"], line["group"]) for line in recorded]
    assert "Traceback" not in stderr
    if rule == "retry":
        assert returncode == 4, stderr[-4000:]
        text = " ".join(stderr.split())
        assert "was lost with its node 1 times (rollouts.group_retries=0" in text
        assert "No episode of it was scored. Run the same command again to resume" in text
        assert len(keys) <= 1 and (1, 0) not in keys and (1, 1) not in keys
    else:
        assert returncode == 0, stderr[-4000:]
        assert "dropped (algo.infrastructure_errors=mask), never scored" in stderr
        assert sorted(keys) in ([(0, 0), (1, 0), (1, 1)], [(0, 1), (1, 0), (1, 1)])
        assert len(keys) == len(set(keys))


def test_ctrl_c_stops_the_run_leaves_no_group_playing_and_the_same_command_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Slow (about 4 minutes on 2 cores: a run interrupted mid-step, then resumed): SIGINT
    to a training run on the cluster while a node plays one of its groups ends it with
    exit 130 and the one line saying how to resume, no traceback; within seconds no node
    plays any of its groups (its Ray job ended with the driver); the same command then
    finishes the run, every (step, group) recorded once."""
    import signal
    import time

    run_dir = tmp_path / "run"
    env = {key: value for key, value in os.environ.items() if key not in ("TINKER_API_KEY", "RAY_ADDRESS")}
    command = [sys.executable, "-m", "piexp", *TRAIN, f"rollouts.address={cluster.address}", f"hydra.run.dir={run_dir}"]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as run:  # fmt: skip
        _a_node_playing(cluster, run)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"piexp: interrupted; nothing is left running. Resume with the same command and hydra.run.dir={run_dir}"
    )
    deadline = time.monotonic() + 30
    while _playing_node(cluster) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _playing_node(cluster) is None, "a node still plays a group of the interrupted run"
    resumed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    outcomes = [json.loads(line) for line in (run_dir / "group_outcomes.jsonl").read_text().splitlines()]
    assert sorted((line["step"], line["group"]) for line in outcomes) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_a_cluster_without_a_node_of_the_resource_is_refused_before_the_run(cluster: Cluster, tmp_path: Path) -> None:
    """Slow (about 10 s on 2 cores): `rollouts.node_resource` that no live node offers
    stops the run before any episode, in one paragraph saying how to start such a node,
    exit 2, the run folder left empty."""
    run_dir = tmp_path / "run"
    done = piexp(*EVAL, "policy=oracle", "rollouts=ray", f"rollouts.address={cluster.address}",
                 "rollouts.node_resource=piexp_nowhere", f"hydra.run.dir={run_dir}")  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    text = " ".join(done.stderr.split())
    assert "has no live node with the resource piexp_nowhere" in text and "ray start --address=" in text
    assert "Traceback" not in done.stderr
    assert not run_dir.exists() or not list(run_dir.iterdir())


@requires_pi
def test_training_in_pi_on_ray_records_every_group_once(cluster: Cluster, tmp_path: Path) -> None:
    """Slow (about 5 minutes on 2 cores): `mode=train harness=pi service=local
    model=tiny-local rollouts=ray` trains two steps whose groups are Pi episodes played on
    the cluster's nodes (each node its own sandbox and Pi); every group is recorded once,
    each transcript Pi's and naming its node, and no episode failed and was played again:
    a node keeps its Pi slots from group to group, and a second group played in another
    event loop than the first found them bound to a closed one. The evaluation at every
    step (`mode.eval_every=1`) plays on the driver, in Pi too, in the loop where the run's
    Pi slots live: played in a fresh loop of an executor thread, the second evaluation
    group found slots of another loop and never ended."""
    run_dir = tmp_path / "run"
    train = [arg for arg in TRAIN if not arg.startswith("mode.eval_every=")]
    done = piexp(*train, "mode.eval_every=1", "harness=pi", "limits.max_turns=4", "limits.max_generation_tokens=512",
                 "harness.options.wall_time_s=600", f"rollouts.address={cluster.address}",
                 f"hydra.run.dir={run_dir}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    outcomes = [json.loads(line) for line in (run_dir / "group_outcomes.jsonl").read_text().splitlines()]
    assert sorted((line["step"], line["group"]) for line in outcomes) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    played = transcripts(run_dir / "train_transcripts.jsonl.gz")
    assert len(played) == 8 and all(t["harness"] == "pi" and t["node"] for t in played)
    assert "FutureWarning" not in done.stderr
    # The cookbook counts each episode its retry strategy played again, per step.
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    # Each step's evaluation: its one eval task's episode, in Pi (only Pi counts sequence
    # splits), graded rather than lost to the harness.
    assert all(step["test/env/all/total_episodes"] == 1 for step in steps), steps
    assert all(
        "test/env/all/sequence_splits" in step and step["test/env/all/infrastructure_error"] == 0 for step in steps
    )
    errors = {key: value for step in steps for key, value in step.items() if key.startswith("rollout_errors/")}
    assert not any(errors.values()), f"episodes failed on the nodes and were played again: {errors}"
