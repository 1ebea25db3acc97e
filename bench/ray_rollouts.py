"""What `rollouts=ray` adds to each unit it sends to a node, against `rollouts=local` in
the same run: the same oracle episodes (an eval's unit; a training group is sent and
returned the same way) played one at a time in this process (`run_episode`, the run's
embedded sandbox) and then on a Ray cluster started on this machine (`RayEpisodePlay`,
one piexp node, its own sandbox), after one warm-up episode that starts the node's
sandbox and builds its policy (reported apart). Also a no-op remote call's round trip
and the pickled size of a training group as it is sent (its NodeGroup, no sampler).

    overhead per unit = median(ray episode wall) - median(local episode wall)

    .venv/bin/python bench/ray_rollouts.py [--episodes 12] [--harnesses builtin pi]

Each harness is measured alike, in the same run: builtin's episodes locally through
`run_episode`, Pi's through the harness's own play (a warm slot); on the node, the same
harness's play against the node's sandbox.
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
from piexp.harness.base import make_harness  # noqa: E402
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


async def _local_walls(config, policy, warm, tasks, settings) -> list[float]:
    """The episodes played in this process: builtin's `run_episode`, or the harness's own
    play (Pi: a warm slot of this process), one event loop for the harness's life."""
    harness = make_harness(config.harness) if config.harness.name != "builtin" else None
    play = harness.play if harness is not None else run_episode
    try:
        await _walls(play, policy, [warm], settings)
        return await _walls(play, policy, tasks, settings)
    finally:
        if harness is not None:
            await harness.aclose()


async def _ray_walls(play, policy, warm, tasks, settings) -> tuple[float, list[float]]:
    warm_up = (await _walls(play, policy, [warm], settings))[0]
    return warm_up, await _walls(play, policy, tasks, settings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--harnesses", nargs="+", default=["builtin", "pi"], help="harnesses measured, each alike")
    args = parser.parse_args()
    figures: dict[str, dict[str, float]] = {}
    trips: list[float] = []
    group_bytes = 0
    cluster_start = 0.0
    for name in args.harnesses:
        overrides = ["mode=eval", "policy=oracle", "family=arith", "lang=python", f"harness={name}",
                     f"tasks.eval_per_family={args.episodes + 1}", "rollouts=ray", "rollouts.local_cpus=1"]  # fmt: skip
        config = load(overrides)
        register_local_model_tokenizer(config.model.name)
        splits = build_splits(config)
        warm, *tasks = splits.eval
        renderer = get_run_renderer(episode_settings(config, "").resolved_renderer_name(), config.model.name)
        policy = make_policy("oracle", renderer, [*splits.train, *splits.eval])
        with run_sandbox(config.sandbox) as url:
            settings = episode_settings(config, url)
            local = asyncio.run(_local_walls(config, policy, warm, tasks, settings))
        assert isinstance(config.rollouts, RayRollouts)
        session = RaySession(config.rollouts, run_key="bench")
        started = time.perf_counter()
        session.connect()
        cluster_start = time.perf_counter() - started
        try:
            import piexp.launch.ray_rollouts as ray_rollouts

            ray_rollouts._session = session
            if not trips:
                no_op = session.remote(_no_op)
                session.ray.get(no_op.remote())
                for _ in range(50):
                    started = time.perf_counter()
                    session.ray.get(no_op.remote())
                    trips.append(time.perf_counter() - started)
                import cloudpickle

                builder = WorkspaceGroupBuilder(task=tasks[0], language="python", settings=settings, group_size=4)
                group = TrainingGroup(inner=builder, step=0, group=0, stages=())
                group_bytes = len(cloudpickle.dumps(group.for_node()))
            play = episode_play(config, run_episode, ["oracle"], [*splits.train, *splits.eval])
            warm_up, on_ray = asyncio.run(_ray_walls(play, policy, warm, tasks, settings))
        finally:
            ray_rollouts._session = None
            session.close()
        median_local, median_ray = statistics.median(local), statistics.median(on_ray)
        figures[name] = {"local": median_local, "ray": median_ray, "warm_up": warm_up}
    table = Table(
        title=f"rollouts=ray against rollouts=local: {args.episodes} oracle episodes a harness, one at a time"
    )
    table.add_column("measure")
    for name in figures:
        table.add_column(name)
    rows = [
        ("local episode wall, median (ms)", lambda f: f"{f['local'] * 1000:.1f}"),
        ("ray episode wall, median (ms)", lambda f: f"{f['ray'] * 1000:.1f}"),
        ("overhead per unit sent, median (ms)", lambda f: f"{(f['ray'] - f['local']) * 1000:.1f}"),
        ("overhead, share of the local episode", lambda f: f"{(f['ray'] - f['local']) / f['local']:.1%}"),
        ("ray / local", lambda f: f"{f['ray'] / f['local']:.2f}x"),
        ("first episode on the node: its sandbox, harness and policy (s)", lambda f: f"{f['warm_up']:.2f}"),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(f) for f in figures.values()))
    Console().print(table)
    notes = [
        f"no-op remote call round trip, median: {statistics.median(trips) * 1000:.2f} ms",
        f"local cluster start: {cluster_start:.1f} s; a training group of 4 as sent, pickled: {group_bytes / 1024:.1f} KB",
        "one node on the driver's machine: the overhead is Ray's dispatch, pickling and the result's return, "
        "not a network's",
    ]
    for note in notes:
        print(note)
    record(__file__, [table], notes=notes)


if __name__ == "__main__":
    main()
