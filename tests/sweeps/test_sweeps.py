"""Parallel, resumable, observable sweeps, and their summary.

One reward sweep (3 jobs, joblib, in parallel) is run with job 1 failing after its run
and before its completed marker, then run again: only job 1 may run the second time."""

from __future__ import annotations

import csv
import multiprocessing
import threading
from datetime import datetime
from pathlib import Path

import pytest

from piexp.config.compose import load
from piexp.run_folder import RunFolder
from piexp.sweeps import SweepStatus, config_hash, write_marker

from sweep_helpers import SweepRuns, read_json, run_piexp


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_sweep_runs_in_parallel_and_reports_failure_at_once(reward_sweep: SweepRuns) -> None:
    first = reward_sweep.first
    assert first.returncode == 1, "a failed job must make the sweep exit non-zero"
    # Reported by the job itself when it failed (not only in Hydra's final message) ...
    assert "piexp: sweep job 1 (reward.weights.output=0.6" in first.stderr and "FAILED" in first.stderr
    assert first.stderr.index("FAILED") < first.stderr.index("Sweep job 1")
    # ... and the final message is one compact line, no traceback.
    assert "Traceback" not in first.stderr.split("Error executing job")[-1]
    jobs = reward_sweep.first_status["jobs"]
    assert {k: v["state"] for k, v in jobs.items()} == {"0": "complete", "1": "failed", "2": "complete"}
    assert "injected failure" in jobs["1"]["error"]
    # The failure did not stop the other jobs; all three ran at the same time, in
    # three processes.
    starts = [_time(job["started_utc"]) for job in jobs.values()]
    ends = [_time(job["finished_utc"]) for job in jobs.values()]
    assert max(starts) < min(ends), "the jobs did not overlap: not parallel"
    assert len({job["pid"] for job in jobs.values()}) == 3
    # Own folder and seed per job; weights as swept.
    for num, weight in (("0", 0.4), ("1", 0.6), ("2", 0.8)):
        config = (reward_sweep.sweep_dir / num / ".hydra" / "config.yaml").read_text()
        assert f"output: {weight}" in config


def test_rerun_redoes_only_the_unfinished_job(reward_sweep: SweepRuns) -> None:
    second, sweep = reward_sweep.second, reward_sweep.sweep_dir
    assert second.returncode == 0, second.stderr[-3000:]
    out = second.stdout + second.stderr
    assert "Skipping job 0" in out and "Skipping job 2" in out and "Skipping job 1" not in out
    jobs = read_json(sweep / "sweep_status.json")["jobs"]
    assert {k: v["state"] for k, v in jobs.items()} == {"0": "skipped", "1": "complete", "2": "skipped"}
    mtimes = reward_sweep.first_mtimes
    for job in ("0", "2"):
        assert (sweep / job / "results.json").stat().st_mtime_ns == mtimes[job], f"job {job} was redone"
    assert (sweep / "1" / "results.json").stat().st_mtime_ns != mtimes["1"], "job 1 was not redone"
    for job in ("0", "1", "2"):
        assert RunFolder(sweep / job).completion() is not None
    assert "skipped: 2" in (sweep / "sweep_status.md").read_text()


def test_summary_rows_match_each_jobs_results(reward_sweep: SweepRuns, tmp_path: Path) -> None:
    sweep = reward_sweep.sweep_dir
    result = run_piexp(tmp_path, "summarize", str(sweep))
    assert result.returncode == 0, result.stderr
    with (sweep / "runs_summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["job"] for row in rows] == ["0", "1", "2"]
    for row, weight in zip(rows, ("0.4", "0.6", "0.8")):
        overall = read_json(sweep / row["job"] / "results.json")["overall"]
        assert row["overrides"] == f"reward.weights.output={weight}"  # only what differs
        assert "experiment=reward_sweep" in row["all_overrides"]
        assert float(row["final_pass@1"]) == pytest.approx(overall["pass@1"])
        assert float(row["best_pass@1"]) == pytest.approx(overall["pass@1"])
        assert float(row["final_reward"]) == pytest.approx(overall["reward_shaped"])
        assert row["mode"] == "eval"
    markdown = (sweep / "runs_summary.md").read_text()
    assert markdown.count("| eval |") == 3 and "reward.weights.output=0.6" in markdown
    for metric in ("pass@1", "reward"):
        assert (sweep / f"runs_summary_{metric}.png").read_bytes()[:4] == b"\x89PNG"


def test_summary_of_train_runs_uses_metrics_jsonl(tmp_path: Path) -> None:
    """A train run folder as tinker-cookbook leaves it: final and best per metric, curves."""
    from piexp.commands.summarize import summarize

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("mode:\n  name: train\n")
    (run / ".hydra" / "overrides.yaml").write_text("- seed=3\n")
    lines = [
        {"step": 0, "env/all/reward/total": 0.2, "test/env/all/passed": 0.1, "test/env/all/total_episodes": 10},
        {"step": 1, "env/all/reward/total": 0.7},
        {"step": 2, "env/all/reward/total": 0.5, "test/env/all/passed": 0.4, "test/env/all/total_episodes": 10},
    ]
    (run / "metrics.jsonl").write_text("\n".join(__import__("json").dumps(x) for x in lines) + "\n{cut")
    (run / "summary.md").write_text("reward rose\n")  # the run's own verdict
    written = summarize(run)
    # summarize never overwrites a run's own summary.md.
    assert (run / "summary.md").read_text() == "reward rose\n"
    with written["csv"].open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["job"], row["mode"], row["overrides"], row["steps"]) == ("run", "train", "seed=3", "3")
    assert (float(row["final_reward"]), float(row["best_reward"])) == (0.5, 0.7)
    assert (float(row["final_pass@1"]), float(row["best_pass@1"])) == (0.4, 0.4)
    # 4 of 10 eval episodes: the half-width of the 95% interval of a share over 10 values.
    assert float(row["pass@1_ci95"]) == pytest.approx(2.262 * (10 / 9 * 0.4 * 0.6) ** 0.5 / 10**0.5, rel=1e-4)
    assert written["reward"].is_file() and written["pass@1"].is_file()


def _train_run_with_eval_reward_only(tmp_path: Path, exported: list[list[float | None]] | None) -> Path:
    """A training run folder as tinker-cookbook leaves it when its metrics carry no
    `passed`: the periodic eval's mean reward (-0.075: overflowed episodes score -0.1) and
    the mean of `functional_correct` over the episodes that were graded; `exported` holds
    per eval step each episode's last-turn functional_correct (None: ended ungraded)."""
    import json

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("mode:\n  name: train\n")
    (run / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    rows = [
        {"step": 0, "env/all/reward/total": -0.06, "test/env/all/reward/total": -0.075,
         "test/env/all/functional_correct": 1.0},
        {"step": 1, "env/all/reward/total": -0.05},
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    for step, outcomes in enumerate(exported or []):
        folder = run / f"iteration_{step:06d}"
        folder.mkdir()
        lines = []
        for outcome in outcomes:
            metrics = {"stop/max_tokens": 1.0} if outcome is None else {"functional_correct": outcome}
            lines.append(json.dumps({"total_reward": 0.0, "steps": [{"metrics": metrics}]}))
        (folder / "eval_test_rollout_summaries.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_the_pass_rate_of_a_training_run_is_never_its_eval_reward(tmp_path: Path) -> None:
    """summarize showed a training run's pass@1 as -0.075: the periodic eval's reward. Its
    pass@1 is the share of the eval episodes that passed, an overflowed one counting as
    failed (the cookbook's mean of functional_correct, 1.0 here, leaves those out)."""
    from piexp.commands.summarize import summarize

    run = _train_run_with_eval_reward_only(tmp_path, [[1.0, None, None, 0.0]])
    written = summarize(run)
    with written["csv"].open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["final_pass@1"]) == 0.25
    assert float(row["pass@1_ci95"]) > 0.25
    assert "-0.075" not in written["md"].read_text()


def test_a_training_run_that_evaluated_nothing_has_no_pass_rate(tmp_path: Path) -> None:
    from piexp.commands.summarize import summarize

    run = _train_run_with_eval_reward_only(tmp_path, None)
    written = summarize(run)
    with written["csv"].open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["final_pass@1"] == row["best_pass@1"] == row["pass@1_ci95"] == ""
    assert float(row["final_reward"]) == -0.05


def test_summary_groups_seeds_uses_the_runs_reward_mode_and_lists_failures_apart(tmp_path: Path) -> None:
    """In `-m seed=0,1 reward=binary,shaped mode=eval` the binary rows show the binary
    reward, seeds are averaged, failed jobs are listed apart from incomplete ones, and a
    job of an earlier, larger sweep in the same folder is left out."""
    import json

    from piexp.commands.summarize import summarize

    sweep = tmp_path / "sweep"
    jobs = {"0": ("binary", 0, 1.0), "1": ("binary", 1, 0.5), "2": ("shaped", 0, 1.0), "3": ("shaped", 1, 0.0)}
    for num, (mode, seed, passed) in jobs.items():
        folder = sweep / num
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "config.yaml").write_text(f"mode:\n  name: eval\nreward:\n  mode: {mode}\n")
        (folder / ".hydra" / "overrides.yaml").write_text(f"- seed={seed}\n- reward={mode}\n- mode=eval\n")
        (folder / "results.json").write_text(
            json.dumps(
                {
                    "overall": {"pass@1": passed, "reward_binary": passed, "reward_shaped": 0.3},
                    "cells": {"arith": {"python": {"pass@1": passed}, "javascript": {"pass@1": 1 - passed}}},
                }
            )
        )
    states = {num: {"job": int(num), "state": "complete", "dir": str(sweep / num)} for num in jobs}
    states["3"]["state"] = "failed"
    (sweep / "sweep_status.json").write_text(json.dumps({"jobs": states}))
    moved = sweep / "1.replaced-20260101T000000Z" / ".hydra"  # moved aside by --replace: not summarised
    moved.mkdir(parents=True)
    (moved / "config.yaml").write_text("mode:\n  name: eval\n")
    written = summarize(sweep)
    with written["csv"].open() as handle:
        rows = {row["job"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(jobs)
    assert float(rows["0"]["final_reward"]) == 1.0 and float(rows["1"]["final_reward"]) == 0.5  # binary
    assert float(rows["2"]["final_reward"]) == pytest.approx(0.3)  # shaped
    markdown = written["md"].read_text()
    assert "- failed: 1 (3)" in markdown
    assert "| reward=binary | 2 | 0.750 ± 3.176 |" in markdown  # mean and 95% CI over seeds 0, 1 (t = 12.706)
    assert "| reward=shaped | 2 | 1.000 |" in markdown  # the failed seed is left out
    # pass@1 broken down by family x language, a row per job
    assert "| job | arith x python | arith x javascript |" in markdown
    assert "| 1 | 0.5 | 0.5 |" in markdown and "| 3 | 0 | 1 |" in markdown
    # ...and as plots: the seed means with their intervals, and the family x language grid
    assert written["pass@1_over_seeds"].is_file() and written["cells"].is_file()
    assert "reward_over_seeds" in written  # binary: seeds 0 and 1 both finished


def test_a_bar_plot_of_many_runs_turns_horizontal_with_every_label(tmp_path: Path) -> None:
    """Labels stay readable for many runs (one row each)."""
    import json

    from PIL import Image

    from piexp.commands.summarize import summarize

    sweep = tmp_path / "sweep"
    for num in range(20):
        folder = sweep / str(num)
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "config.yaml").write_text("mode:\n  name: eval\n")
        (folder / ".hydra" / "overrides.yaml").write_text(f"- seed={num}\n- mode=eval\n")
        (folder / "results.json").write_text(json.dumps({"overall": {"pass@1": num / 20, "reward_shaped": 0.1}}))
    written = summarize(sweep)
    width, height = Image.open(written["pass@1"]).size
    assert height > 1.4 * 540 and width == 960  # 20 rows: taller than the 4.5-inch default


@pytest.mark.parametrize("make", ["missing", "file", "empty"])
def test_summarize_bad_dir_is_one_paragraph_exit_2(tmp_path: Path, make: str) -> None:
    target = tmp_path / "target"
    if make == "file":
        target.write_text("x")
    elif make == "empty":
        target.mkdir()
    result = run_piexp(tmp_path, "summarize", str(target))
    assert result.returncode == 2
    assert result.stderr.startswith("piexp: Cannot summarize") and "Traceback" not in result.stderr


def test_marker_hash_is_the_resolved_config(tmp_path: Path) -> None:
    a = load(["family=arith", "seed=1"])
    assert config_hash(a) == config_hash(load(["seed=1", "family=arith"]))
    assert config_hash(a) != config_hash(load(["family=arith", "seed=2"]))
    write_marker(tmp_path, config_hash(a), metric=0.5, overrides=["seed=1"])
    assert RunFolder(tmp_path).completion()["config_hash"] == config_hash(a)
    (tmp_path / ".piexp" / "complete.json").write_text('{"config_hash": ')  # torn write
    assert RunFolder(tmp_path).completion() is None


def test_changed_config_in_same_folder_reruns(tmp_path: Path) -> None:
    from piexp.sweeps import JobInfo, run_tracked

    calls: list[int] = []

    def fake_run(config, run_dir):  # noqa: ANN001
        calls.append(config.seed)
        return float(config.seed)

    job = JobInfo(num=0, overrides=["seed=1"], sweep_dir=tmp_path)
    assert run_tracked(load(["seed=1"]), tmp_path / "0", job, fake_run) == 1.0
    assert run_tracked(load(["seed=1"]), tmp_path / "0", job, fake_run) == 1.0  # skipped
    assert run_tracked(load(["seed=2"]), tmp_path / "0", job, fake_run) == 2.0  # other config
    assert calls == [1, 2]


def _update_many(sweep_dir: str, job: int) -> None:
    status = SweepStatus(Path(sweep_dir))
    for i in range(15):
        status.update(job, state="running", metric=float(i))


def test_status_updates_from_parallel_processes_are_not_lost(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_update_many, args=(str(tmp_path), job)) for job in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    jobs = SweepStatus(tmp_path).read()["jobs"]
    assert sorted(jobs) == ["0", "1", "2", "3"] and all(j["metric"] == 14.0 for j in jobs.values())


def test_parallel_embedded_sandboxes_get_distinct_ports() -> None:
    """Each job starts its own embedded sandbox on a free port; several starting at
    once must neither share a port nor lose their server. Each is started and stopped by
    a thread that stays alive meanwhile: the server gets SIGKILL (PR_SET_PDEATHSIG) when
    the *thread* that started it ends."""
    from piexp.sandbox.embedded import EmbeddedSandbox

    boxes = [EmbeddedSandbox() for _ in range(3)]
    started = threading.Barrier(len(boxes) + 1, timeout=90)
    done = threading.Event()
    errors: list[BaseException] = []

    def serve(box: EmbeddedSandbox) -> None:
        try:
            box.start()
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
        try:
            started.wait()
            done.wait(90)
        finally:
            box.stop()

    threads = [threading.Thread(target=serve, args=(box,)) for box in boxes]
    for thread in threads:
        thread.start()
    try:
        started.wait()
        assert not errors
        assert len({box.port for box in boxes}) == 3
        assert all(box.proc is not None and box.proc.poll() is None for box in boxes)
        import urllib.request

        for box in boxes:
            with urllib.request.urlopen(f"{box.base_url}/v1/ping", timeout=5) as response:
                assert response.status == 200
    finally:
        done.set()
        for thread in threads:
            thread.join(30)
