"""What `rollouts=ray` adds to each unit it sends to a node, against `rollouts=local` in
the same run: the same oracle episodes (an eval's unit; a training group is sent and
returned the same way) played one at a time in this process (`run_episode`, the run's
embedded sandbox) and then on a Ray cluster started on this machine (`RayEpisodePlay`,
one piexp node, its own sandbox), after one warm-up episode that starts the node's
sandbox and builds its policy (reported apart). Also a no-op remote call's round trip
and the pickled size of a training group as it is sent (its NodeGroup, no sampler).

    overhead per unit = median(ray episode wall) - median(local episode wall)

    .venv/bin/python bench/ray_rollouts.py [--episodes 12]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from piexp.config.compose import load  # noqa: E402
from piexp.config.rollouts import RayRollouts  # noqa: E402
from piexp.env.dataset import episode_settings  # noqa: E402
from piexp.env.episode import WorkspaceGroupBuilder, get_run_renderer  # noqa: E402
from piexp.env.splits import build_splits  # noqa: E402
from piexp.env.training_pipeline import TrainingGroup  # noqa: E402
from piexp.launch.base_model import register_local_model_tokenizer  # noqa: E402
from piexp.launch.ray_rollouts import RaySession, episode_play  # noqa: E402
from piexp.launch.sandbox import run_sandbox  # noqa: E402
from piexp.policies import make_policy  # noqa: E402
from piexp.policies.rollout import run_episode  # noqa: E402

from record import record  # noqa: E402


def _no_op() -> None:
    return None


async def _walls(play, policy, tasks, settings) -> list[float]:
    walls = []
    for task in tasks:
        started = time.perf_counter()
        done = await play(policy, "oracle", task, "python", settings, sample=0)
        assert done.reward == 1.0, done.error
        walls.append(time.perf_counter() - started)
    return walls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=12)
    args = parser.parse_args()
    config = load(["mode=eval", "policy=oracle", "family=arith", "lang=python", f"tasks.eval_per_family={args.episodes + 1}",
                   "rollouts=ray", "rollouts.local_cpus=1"])  # fmt: skip
    register_local_model_tokenizer(config.model.name)
    splits = build_splits(config)
    warm, *tasks = splits.eval
    renderer = get_run_renderer(episode_settings(config, "").resolved_renderer_name(), config.model.name)
    policy = make_policy("oracle", renderer, [*splits.train, *splits.eval])
    with run_sandbox(config.sandbox) as url:
        settings = episode_settings(config, url)
        asyncio.run(_walls(run_episode, policy, [warm], settings))
        local = asyncio.run(_walls(run_episode, policy, tasks, settings))
    assert isinstance(config.rollouts, RayRollouts)
    session = RaySession(config.rollouts, run_key="bench")
    started = time.perf_counter()
    session.connect()
    cluster_start = time.perf_counter() - started
    try:
        import piexp.launch.ray_rollouts as ray_rollouts

        ray_rollouts._session = session
        no_op = session.remote(_no_op)
        session.ray.get(no_op.remote())
        trips = []
        for _ in range(50):
            started = time.perf_counter()
            session.ray.get(no_op.remote())
            trips.append(time.perf_counter() - started)
        play = episode_play(config, run_episode, ["oracle"], [*splits.train, *splits.eval])
        warm_up = asyncio.run(_walls(play, policy, [warm], settings))[0]
        on_ray = asyncio.run(_walls(play, policy, tasks, settings))
        import cloudpickle

        builder = WorkspaceGroupBuilder(task=tasks[0], language="python", settings=settings, group_size=4)
        group_bytes = len(cloudpickle.dumps(TrainingGroup(inner=builder, step=0, group=0, stages=()).for_node()))
    finally:
        ray_rollouts._session = None
        session.close()
    median_local, median_ray = statistics.median(local), statistics.median(on_ray)
    table = Table(title=f"rollouts=ray against rollouts=local: {len(tasks)} oracle episodes, one at a time")
    for column in ("measure", "value"):
        table.add_column(column)
    rows = [
        ("local episode wall, median (ms)", f"{median_local * 1000:.1f}"),
        ("ray episode wall, median (ms)", f"{median_ray * 1000:.1f}"),
        ("overhead per unit sent, median (ms)", f"{(median_ray - median_local) * 1000:.1f}"),
        ("ray / local", f"{median_ray / median_local:.2f}x"),
        ("no-op remote call round trip, median (ms)", f"{statistics.median(trips) * 1000:.2f}"),
        ("first episode on the node: its sandbox and policy (s)", f"{warm_up:.2f}"),
        ("local cluster start (s)", f"{cluster_start:.1f}"),
        ("a training group of 4 as sent, pickled (KB)", f"{group_bytes / 1024:.1f}"),
    ]
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    record(__file__, [table], notes=["one node on the driver's machine: the overhead is Ray's dispatch, "
                                     "pickling and the result's return, not a network's"])  # fmt: skip


if __name__ == "__main__":
    main()
