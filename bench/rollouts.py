"""Oracle episodes per second, end to end, and where an episode's wall time goes.

Runs the oracle through the real path (renderer, env, tools, embedded sandbox, reward,
tinker-cookbook's do_group_rollout) at concurrency 1 and 8 and splits each episode's wall
time: `sandbox` (awaiting the sandbox client's `run`: payload, HTTP, the server's queue
and the program), `policy` (inside the policy's `__call__`: the scripted policy stands in
for the model's sampler), `wait` (training groups only: waiting for the group's other
episodes) and `harness`, everything else (rendering, tokenizing, parsing, the tools' own
work, the env's bookkeeping, thread hops, reward). The sandbox part is split further with
the server's `Server-Timing` spans: `server` (all its spans) and `queue` (waiting for a
run slot: at concurrency 8 the server runs 2 x cores programs at once).

    harness share = (wall - sandbox - policy - wait) / wall      <- the target: under 10%
    strict        = (wall - server - policy - wait) / wall       (client and transport as harness)
    outside sandbox = (wall - sandbox - wait) / wall             (harness + policy)

Transcripts: every pass runs without and with recording (`record` column) on two paths,
with the recording's own work (`record` ms: building and writing the transcripts, part
of harness) and the harness share with recording minus without (target: under 2 points):
`eval` (each episode alone, `run_episode(record_transcript=...)`, written as `mode=eval`
does) and `train` (the train dataset as the RL loop gets it, `RecordingDatasetBuilder` in
a scratch run folder, one batch of `--group-size` groups per pass, graded by the cookbook;
concurrency counts groups in flight and each episode is given its group's wall time).

How to read it: compare rows of one run, not runs of different days (a shared machine is
noisy). At concurrency 8 on 2 busy cores the with-minus-without difference swings by a
few points either way between runs; the recording's own work, timed directly, is the
steadier figure. By default every pass runs tasks no earlier pass ran ("new": new text to
the tokenizer's encode memo); `--reuse-tasks` cycles the same tasks ("reused"). The last
lines give the tokenizer's encode memo and the policy's decode memo hits.

    .venv/bin/python bench/rollouts.py [--episodes 48] [--repeat 3] [--reuse-tasks] [--families arith,csv_agg]
                                       [--paths eval,train] [--group-size 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import statistics
import sys
import tempfile
import time
from typing import Any
from pathlib import Path

import httpx
from tinker_cookbook.rl import rollouts as cookbook_rollouts
from tinker_cookbook.rl.rollouts import do_group_rollout

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from piexp.config.compose import load  # noqa: E402
from piexp.env.dataset import episode_settings  # noqa: E402
from piexp.env.episode import get_run_renderer  # noqa: E402
from piexp.env.splits import build_splits  # noqa: E402
from piexp.env.task_sampler import TrainingControls  # noqa: E402
from piexp.launch import train_transcripts as train_transcripts_module  # noqa: E402
from piexp.env.training_pipeline import TrainingDataset  # noqa: E402
from piexp.launch.train_transcripts import RecordingDatasetBuilder, TrainRecorder, TranscriptRecord  # noqa: E402
from piexp.policies import make_policy  # noqa: E402
from piexp.policies import rollout as rollout_module  # noqa: E402
from piexp.policies.rollout import run_episode  # noqa: E402
from piexp.sandbox import client as sandbox_client_module  # noqa: E402
from piexp.sandbox.client import close_sandbox_clients  # noqa: E402
from piexp.sandbox.embedded import EmbeddedSandbox  # noqa: E402
from piexp.transcripts.store import TRAIN_TRANSCRIPTS, TranscriptWriter  # noqa: E402

# Per-episode accumulators, set inside each episode's task (tasks copy the context).
_sandbox_s: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("sandbox_s", default=None)
_policy_s: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("policy_s", default=None)
# The recording's own work (box[0]; box[1] is 1 inside a timed call, so nested calls count once).
_record_s: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("record_s", default=None)
# Each episode's (start, end) of the cookbook's `do_single_rollout`: a group's siblings' waits.
_episodes_s: contextvars.ContextVar[list[tuple[float, float]] | None] = contextvars.ContextVar(
    "episodes_s", default=None
)


def _instrument_sandbox() -> None:
    """Time each episode's awaits of `SandboxClient.run` (box[0]) and add up the server's
    own spans from its `Server-Timing` header (box[1]: all of them, box[2]: the queue
    span), so the bench can tell the server's time from the client's and the transport's."""
    original = sandbox_client_module.SandboxClient.run

    async def timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return await original(self, *args, **kwargs)
        finally:
            box = _sandbox_s.get()
            if box is not None:
                box[0] += time.perf_counter() - start

    sandbox_client_module.SandboxClient.run = timed  # type: ignore[method-assign]
    post = httpx.AsyncClient.post

    async def post_with_spans(self, *args, **kwargs):
        response = await post(self, *args, **kwargs)
        box = _sandbox_s.get()
        if box is not None:
            for part in response.headers.get("server-timing", "").split(","):
                name, _, duration = part.strip().partition(";dur=")
                if name and duration:
                    box[1] += float(duration) / 1e3
                    if name == "queue":
                        box[2] += float(duration) / 1e3
        return response

    httpx.AsyncClient.post = post_with_spans  # type: ignore[method-assign]


def _instrument_episodes() -> None:
    """Note when each episode (the cookbook's `do_single_rollout`, which its rollout
    strategies import at each call) starts and ends."""
    original = cookbook_rollouts.do_single_rollout

    async def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            spans = _episodes_s.get()
            if spans is not None:
                spans.append((start, time.perf_counter()))

    cookbook_rollouts.do_single_rollout = timed


def _instrument_recording() -> None:
    """Time the recording's own work, which is synchronous: building a transcript (eval:
    `run_episode(record_transcript=True)`; train: the recording group's `fill_record`,
    its grading included, which only the recording does there) and writing it."""

    def timed(owner, name: str) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            box = _record_s.get()
            if box is None or box[1]:
                return original(*args, **kwargs)
            box[1] = 1.0
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                box[0] += time.perf_counter() - start
                box[1] = 0.0

        setattr(owner, name, wrapper)

    timed(rollout_module, "build_transcript")
    timed(train_transcripts_module, "fill_record")
    timed(TranscriptWriter, "write")


def _sibling_wait(spans: list[tuple[float, float]]) -> float:
    """A group's episodes' time spent waiting for their siblings: before the first one
    starts, and after each ends until the last one does (an episode is done only when its
    group is graded). Zero for an episode alone."""
    if not spans:
        return 0.0
    first, last = min(start for start, _ in spans), max(end for _, end in spans)
    return sum((start - first) + (last - end) for start, end in spans)


class TimedPolicy:
    def __init__(self, inner) -> None:
        self.inner = inner

    async def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return await self.inner(*args, **kwargs)
        finally:
            box = _policy_s.get()
            if box is not None:
                box[0] += time.perf_counter() - start


async def _timed_pass(concurrency: int, units, record: bool) -> dict[str, Any]:
    """One pass: each of `units` (no-argument coroutine functions, at most `concurrency`
    at once) runs some episodes and returns how many; every episode of a unit is given the
    unit's wall time (an eval episode's own; a group's, for each of its episodes), and the
    unit's sandbox and policy time are the sums over its episodes."""
    semaphore = asyncio.Semaphore(concurrency)
    rows: list[tuple[float, float, float, float, float, int, float, float]] = []

    async def one(unit):
        async with semaphore:
            sandbox_box, policy_box = [0.0, 0.0, 0.0], [0.0]
            _sandbox_s.set(sandbox_box)  # the episodes' tasks, a group's included, copy this context
            _policy_s.set(policy_box)
            spans: list[tuple[float, float]] = []
            _episodes_s.set(spans)
            record_box = [0.0, 0.0]
            _record_s.set(record_box)
            begun = time.perf_counter()
            episodes = await unit()
            wall = time.perf_counter() - begun
            rows.append(
                (
                    *(wall, sandbox_box[0], policy_box[0], sandbox_box[1], sandbox_box[2]),
                    *(episodes, _sibling_wait(spans), record_box[0]),
                )
            )

    start = time.perf_counter()
    await asyncio.gather(*(one(unit) for unit in units))
    elapsed = time.perf_counter() - start
    n = sum(r[5] for r in rows)
    wall = sum(r[0] * r[5] for r in rows)
    sandbox, policy_time, server, queue = (sum(r[i] for r in rows) for i in range(1, 5))
    # The recording runs once a group is graded, so, like the wall, it counts once per episode.
    wait, recording = sum(r[6] for r in rows), sum(r[7] * r[5] for r in rows)
    harness = wall - sandbox - policy_time - wait
    return {
        "concurrency": concurrency,
        "record": record,
        "episodes": n,
        "episodes_per_s": n / elapsed,
        "median_episode_s": statistics.median(r[0] for r in rows),
        "wall_ms": wall / n * 1e3,
        "sandbox_ms": sandbox / n * 1e3,
        "server_ms": server / n * 1e3,
        "queue_ms": queue / n * 1e3,
        "policy_ms": policy_time / n * 1e3,
        "wait_ms": wait / n * 1e3,
        "record_ms": recording / n * 1e3,  # part of harness_ms
        "harness_ms": harness / n * 1e3,
        "harness_share": harness / wall,
        # Counting the client/transport part of the sandbox time (sandbox - server) as
        # harness too: the strictest reading.
        "harness_share_strict": (wall - server - policy_time - wait) / wall,
        "record_share": recording / wall,
        "share_outside_sandbox": (wall - sandbox - wait) / wall,
        "share_in_policy": policy_time / wall,
    }


def _episode_units(jobs, policy, settings, writer=None) -> list:
    """The eval path: one oracle episode per job; with a `writer`, its transcript is
    recorded and written, as `mode=eval` does."""

    def unit(task, language):
        async def run() -> int:
            record = await run_episode(policy, "oracle", task, language, settings, record_transcript=writer is not None)
            if writer is not None:
                writer.write(record.transcript)
            assert record.error is None and record.reward == 1.0, (record.error, record.last_run)
            return 1

        return run

    return [unit(task, language) for task, language in jobs]


def _group_units(builders, policy) -> list:
    """The training path: one unit per env group builder of a train batch, rolled out
    and graded by the cookbook (`do_group_rollout`, which awaits the builder's
    `compute_group_rewards`: with the transcript stage, that writes the group's
    transcripts)."""

    def unit(builder):
        async def run() -> int:
            group = await do_group_rollout(builder, policy)
            rewards = group.get_total_rewards()
            assert not group.rollout_errors and min(rewards) > 0, (group.rollout_errors, rewards)
            return len(group.trajectories_G)

        return run

    return [unit(builder) for builder in builders]


async def _eval_passes(args: argparse.Namespace, sandbox_url: str, scratch: Path) -> tuple[list[dict], list[str]]:
    passes = 4 * args.repeat  # 2 concurrencies x without / with recording
    slots = 1 if args.reuse_tasks else passes
    # One task per family for the warm-up, then `--tasks` per family for each pass.
    config = load(
        [
            "mode=check",
            f"family=[{args.families}]",
            "lang=[python,javascript]",
            f"tasks.train_per_family={1 + args.tasks * slots}",
            "tasks.eval_per_family=1",
        ]
    )
    splits = build_splits(config)
    by_family: dict[str, list] = {}
    for task in splits.train:
        by_family.setdefault(task.family, []).append(task)

    def jobs_for(first: int, count: int, episodes: int) -> list:
        pool = [
            (task, language)
            for tasks in by_family.values()
            for task in tasks[first : first + count]
            for language in ("python", "javascript")
        ]
        return [pool[i % len(pool)] for i in range(episodes)]

    results = []
    with TranscriptWriter(scratch / "transcripts.jsonl.gz") as writer:
        settings = episode_settings(config, sandbox_url)
        renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
        policy = TimedPolicy(make_policy("oracle", renderer, splits.train))
        # Warm-up on tasks of its own: tokenizer, runtimes, connections, the system prompt.
        await _timed_pass(2, _episode_units(jobs_for(0, 1, 4), policy, settings), False)
        slot = 0
        for _ in range(args.repeat):
            for concurrency in (1, 8):
                for record in (False, True):
                    # Each mode on tasks of its own (new to the memos, unless --reuse-tasks).
                    first = 1 + args.tasks * (0 if args.reuse_tasks else slot)
                    jobs = jobs_for(first, args.tasks, args.episodes)
                    units = _episode_units(jobs, policy, settings, writer if record else None)
                    row = await _timed_pass(concurrency, units, record)
                    row["path"] = "eval"
                    row["tasks"] = "reused" if args.reuse_tasks and slot else "new"
                    results.append(row)
                    slot += 1
    return results, _memo_stats(renderer, policy.inner, "eval")


async def _train_passes(args: argparse.Namespace, sandbox_url: str, scratch: Path) -> tuple[list[dict], list[str]]:
    """The training path: the train dataset as the RL loop gets it (`RecordingDatasetBuilder`,
    as train.py builds it), one batch per pass; `record` passes take the batch from the
    training chain, the others from the same chain without its transcript stage."""
    passes = 4 * args.repeat
    families = args.families.split(",")
    # One batch per pass, of at least --episodes episodes, each family in each language
    # equally in every batch (the schedule goes round the families, each family's groups
    # alternate the languages), so passes compare: the programs' cost differs by both.
    mix = 2 * len(families)
    groups = mix * max(1, -(-args.episodes // (args.group_size * mix)))
    batches = 1 + (1 if args.reuse_tasks else passes)  # the warm-up's, then each pass's
    per_family = -(-batches * groups // (2 * len(families))) + 1
    config = load(
        [
            "mode=train",
            f"family=[{args.families}]",
            "lang=[python,javascript]",
            # Another seed than the eval passes': tasks of their own, new to the memos.
            "seed=1",
            f"tasks.train_per_family={per_family}",
            "tasks.eval_per_family=1",
            # Every batch mixes the families, as each eval pass does.
            "tasks.family_weights={" + ",".join(f"{name}:1" for name in families) + "}",
            f"mode.group_size={args.group_size}",
            f"mode.groups_per_batch={groups}",
            f"mode.max_steps={batches}",
        ]
    )
    run_dir = scratch / "train"  # the run folder: train transcripts, group outcomes
    run_dir.mkdir()
    recording, _evaluation = await RecordingDatasetBuilder(
        config_json=config.model_dump_json(), sandbox_url=sandbox_url, run_dir=str(run_dir)
    )()
    assert isinstance(recording, TrainingDataset)
    unrecorded = TrainingDataset(
        recording.sampling, [s for s in recording.stages if not isinstance(s, TranscriptRecord)], sandbox_url
    )
    settings = episode_settings(config, sandbox_url)
    renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
    policy = TimedPolicy(make_policy("oracle", renderer, build_splits(config).train))
    results: list[dict[str, Any]] = []
    try:
        await _timed_pass(2, _group_units(unrecorded.get_batch(0), policy), False)  # warm-up
        index = 0
        for _ in range(args.repeat):
            for concurrency in (1, 8):
                for record in (False, True):
                    index = 1 if args.reuse_tasks else index + 1
                    dataset = recording if record else unrecorded
                    row = await _timed_pass(concurrency, _group_units(dataset.get_batch(index), policy), record)
                    row["path"] = "train"
                    row["tasks"] = "reused" if args.reuse_tasks and index == 1 and results else "new"
                    results.append(row)
    finally:
        TrainRecorder.close(str(run_dir / TRAIN_TRANSCRIPTS))
        TrainingControls.forget(str(run_dir))
    return results, _memo_stats(renderer, policy.inner, "train")


async def main_async(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
    _instrument_sandbox()
    _instrument_episodes()
    _instrument_recording()
    results, memo_lines = [], []
    with EmbeddedSandbox() as sandbox, tempfile.TemporaryDirectory() as scratch:
        for name, passes in (("eval", _eval_passes), ("train", _train_passes)):
            if name in args.paths.split(","):
                rows, lines = await passes(args, sandbox.url, Path(scratch))
                results += rows
                memo_lines += lines
        await close_sandbox_clients()
    return results, memo_lines


def _memo_stats(renderer, policy, path: str) -> list[str]:
    """The memos' counts after `path`'s passes (the renderer's tokenizer is the process's:
    its counts add up over the paths)."""
    lines = []
    encode = getattr(renderer.tokenizer, "encode_cache", None)
    if encode is not None:
        lines.append(
            f"after the {path} passes: tokenizer encode memo: {encode.hits} hits, {encode.misses} misses, "
            f"{len(encode)} entries, {encode.chars} chars"
        )
    decode = getattr(policy, "_decoded", None)
    if decode is not None:
        lines.append(f"{path} policy's decode memo: {decode.hits} prefix hits, {decode.misses} full decodes")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--tasks", type=int, default=3, help="train tasks per family in each pass")
    parser.add_argument(
        "--reuse-tasks",
        action="store_true",
        help="every pass runs the same tasks (their texts are then in the tokenizer's memo)",
    )
    parser.add_argument(
        "--families", default="arith,csv_agg,log_stats,json_tree,graph_paths,grid_search,number_theory,dates"
    )
    parser.add_argument("--repeat", type=int, default=1, help="passes at each concurrency, in one process")
    parser.add_argument(
        "--paths", default="eval,train", help="the recording paths measured: eval (episodes), train (groups)"
    )
    parser.add_argument("--group-size", type=int, default=4, help="train path: episodes per group (mode.group_size)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results, memo_lines = asyncio.run(main_async(args))
    print(
        "sandbox = awaiting SandboxClient.run; server = the server's own spans (Server-Timing), queue"
        " included;\nharness = wall - sandbox - policy - wait (the scripted policy stands in for the sampler;"
        " wait: a group's episodes waiting for their siblings);"
        " strict = (wall - server - policy - wait) / wall. Target: harness < 10%. Means per episode.\n"
        f"eval rows: concurrency = episodes in flight; train rows: groups of {args.group_size} in flight, each"
        " episode given its group's wall time (median s: a group's)."
    )
    print(
        f"{'path':>5} {'concurrency':>11} {'record':>6} {'tasks':>6} {'episodes/s':>10} {'median s':>9} {'wall ms':>8} {'sandbox ms':>10} "
        f"{'(server':>7} {'queue)':>6} {'policy ms':>9} {'wait ms':>7} {'harness ms':>10} {'(record)':>8} {'harness':>8} {'strict':>7} "
        f"{'outside sandbox':>16}"
    )
    for row in sorted(results, key=lambda r: (r["path"], r["concurrency"])):  # stable: passes in run order
        flag = "ok" if row["harness_share"] < 0.10 else "ABOVE 10% TARGET"
        print(
            f"{row['path']:>5} {row['concurrency']:>11} {'yes' if row['record'] else 'no':>6} {row['tasks']:>6} {row['episodes_per_s']:>10.2f} {row['median_episode_s']:>9.3f} "
            f"{row['wall_ms']:>8.1f} {row['sandbox_ms']:>10.1f} {row['server_ms']:>7.1f} {row['queue_ms']:>6.1f} "
            f"{row['policy_ms']:>9.1f} {row['wait_ms']:>7.1f} {row['harness_ms']:>10.1f} {row['record_ms']:>8.1f} {row['harness_share']:>7.1%} "
            f"{row['harness_share_strict']:>7.1%} {row['share_outside_sandbox']:>16.1%}  {flag}"
        )
    for path, concurrency in sorted({(row["path"], row["concurrency"]) for row in results}):
        shares = {
            record: statistics.mean(
                r["harness_share"]
                for r in results
                if r["path"] == path and r["concurrency"] == concurrency and r["record"] == record
            )
            for record in (False, True)
        }
        added = 100 * (shares[True] - shares[False])
        own = statistics.mean(
            r["record_share"] for r in results if r["path"] == path and r["concurrency"] == concurrency and r["record"]
        )
        print(
            f"recording {path} transcripts at concurrency {concurrency}: harness share {shares[False]:.1%} without, "
            f"{shares[True]:.1%} with: {added:+.2f} points ({'ok' if added < 2 else 'ABOVE 2-POINT TARGET'}); the recording's own work "
            f"{100 * own:.2f} points"
        )
    for line in memo_lines:
        print(line)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    from record import record as record_results

    keys: tuple[str, ...] = ("path", "concurrency", "record", "tasks", "episodes_per_s", "median_episode_s")
    keys += ("wall_ms", "sandbox_ms", "server_ms", "queue_ms", "policy_ms", "wait_ms", "harness_ms", "record_ms")
    keys += ("harness_share", "harness_share_strict", "share_outside_sandbox")
    rows = [[f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in keys] for row in results]
    record_results(
        __file__, [{"title": "oracle episodes, means per episode", "columns": keys, "rows": rows}], memo_lines
    )


if __name__ == "__main__":
    main()
