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
    return subprocess.run(
        [sys.executable, "-m", "piexp", *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def transcripts(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as lines:
        return [json.loads(line) for line in lines if line.strip()]


EVAL = ["mode=eval", "family=arith", "lang=python", "tasks.eval_per_family=4", "mode.preflight=false"]


@pytest.mark.parametrize("policy", ["oracle", "wrong"])
def test_an_eval_on_ray_gives_the_local_pass_at_1(cluster: Cluster, tmp_path: Path, policy: str) -> None:
    """Slow (about 70 s a policy on 2 cores, the cluster's start shared): a scripted
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
