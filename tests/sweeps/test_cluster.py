"""Sweeps through Hydra's submitit launcher (the `slurm` extra), run with submitit's local
executor: the same pickling, job folders and result files as on SLURM, in processes on
this machine.

Real processes throughout: a job fails because its service really is unreachable, and
the kill test sends SIGKILL to a running job's process and to the launching process,
then runs the same command again."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from piexp.sweeps import STALE_AFTER_S, SweepStatus

from sweep_helpers import SMALL, read_json, run_piexp

LOCAL = "hydra/launcher=submitit_local"
# Episodes per kill-test job, one at a time: long enough (seconds) to be killed half-way.
KILL_EPISODES = 40


def _states(sweep: Path) -> dict[str, str]:
    return {num: entry["state"] for num, entry in read_json(sweep / "sweep_status.json")["jobs"].items()}


def _episode_keys(run_dir: Path) -> list[tuple]:
    """The (task, language, sample) of every complete record of episodes.jsonl."""
    keys = []
    for line in (run_dir / "episodes.jsonl").read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the line a SIGKILL cut short
        keys.append((record["task_id"], record["language"], record["sample"]))
    return keys


def _job_logs(sweep: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted((sweep / ".submitit").glob("*/*_log.*")))


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.parametrize(
    ("launcher", "target", "extra"),
    [
        ("submitit_local", "LocalLauncher", []),
        (
            "submitit_slurm",
            "SlurmLauncher",
            ["hydra.launcher.partition=gpu", "hydra.launcher.timeout_min=240", "hydra.launcher.cpus_per_task=8"],
        ),
    ],
)
def test_submitit_launchers_compose_from_piexps_config(
    tmp_path: Path, launcher: str, target: str, extra: list[str]
) -> None:
    result = run_piexp(tmp_path, f"hydra/launcher={launcher}", *extra, "--cfg", "hydra", "--package", "hydra.launcher")
    assert result.returncode == 0, result.stderr
    assert f"hydra_submitit_launcher.submitit_launcher.{target}" in result.stdout
    assert "submitit_folder: ${hydra.sweep.dir}/.submitit/%j" in result.stdout
    for override in extra:
        key, value = override.removeprefix("hydra.launcher.").split("=")
        assert f"{key}: {value}" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_failing_job_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    """Job 0 evaluates a model behind a service that refuses connections (a real failure
    at run time, past validation); job 1 runs the oracle and must still complete."""
    sweep = tmp_path / "sweep"
    result = run_piexp(
        tmp_path,
        "-m",
        LOCAL,
        *SMALL,
        "policy=model,oracle",
        "service.base_url=http://127.0.0.1:9",
        "service.connect_timeout_s=3",
        f"hydra.sweep.dir={sweep}",
        env={"TINKER_API_KEY": "sk-test-not-real"},
    )
    assert result.returncode == 1, result.stderr[-3000:]
    message = " ".join(result.stderr.split())
    assert "Sweep job 0 (" in message and "could not be reached" in message
    assert "Traceback" not in result.stderr
    assert _states(sweep) == {"0": "failed", "1": "complete"}
    assert "127.0.0.1:9" in read_json(sweep / "sweep_status.json")["jobs"]["0"]["error"]
    assert read_json(sweep / "1" / "results.json")["overall"]["pass@1"] == 1.0
    # The job itself said so on its stderr (in submitit's job log) the moment it failed.
    assert "piexp: sweep job 0 (" in _job_logs(sweep) and "FAILED" in _job_logs(sweep)


@dataclass
class KilledSweep:
    sweep: Path
    args: list[str]
    running_entry: dict  # job 1's status entry just before the kill
    status_after_kill: subprocess.CompletedProcess[str]
    files_after_status: tuple[dict[str, str], str]  # sweep_status.json's states and .md then
    episodes_before: list[tuple]  # job 1's finished episodes when it was killed
    rerun: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def killed_sweep(tmp_path_factory: pytest.TempPathFactory, wait_until) -> KilledSweep:  # noqa: ANN001
    """Three eval jobs through submitit_local; once job 1 has finished a few episodes,
    SIGKILL its process and the launching process; then the same command again."""
    work = tmp_path_factory.mktemp("killed")
    sweep = work / "sweep"
    args = [
        "-m",
        LOCAL,
        *SMALL,
        "seed=0,1,2",
        f"k={KILL_EPISODES}",
        "mode.max_concurrency=1",
        f"hydra.sweep.dir={sweep}",
    ]
    environment = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "PIEXP_SWEEP_FAIL_JOBS")}
    with open(work / "launcher.log", "w") as log:
        # Its own session: submitit's job controllers outlive a killed launcher (as SLURM
        # jobs outlive theirs); the session lets the teardown find every one of them.
        launcher = subprocess.Popen(
            [sys.executable, "-m", "piexp", *args],
            cwd=work,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def job1_half_done() -> dict | None:
            entry = SweepStatus(sweep).read()["jobs"].get("1")
            if entry is None or entry.get("state") != "running" or not (sweep / "1" / "episodes.jsonl").exists():
                return None
            return entry if len(_episode_keys(sweep / "1")) >= 5 else None

        running = wait_until("job 1 to finish 5 episodes", job1_half_done, timeout=120, every=0.1)
        assert len(_episode_keys(sweep / "1")) < KILL_EPISODES, "job 1 finished before the kill: raise KILL_EPISODES"
        os.kill(running["pid"], signal.SIGKILL)
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(30)
        wait_until("job 1's process to be gone", lambda: _gone(running["pid"]), timeout=30, every=0.1)
        status_after_kill = run_piexp(work, "status", str(sweep))
        files_after_status = (_states(sweep), (sweep / "sweep_status.md").read_text())
        episodes_before = _episode_keys(sweep / "1")
        rerun = run_piexp(work, *args, timeout=300)
    finally:
        try:
            os.killpg(launcher.pid, signal.SIGKILL)  # any job controller still alive
        except ProcessLookupError:
            pass
    return KilledSweep(sweep, args, running, status_after_kill, files_after_status, episodes_before, rerun)


def test_running_job_records_its_owner_and_heartbeat(killed_sweep: KilledSweep) -> None:
    entry = killed_sweep.running_entry
    assert entry["host"] == socket.gethostname()
    assert isinstance(entry["pid"], int) and entry["pid_start"]
    assert entry["started_utc"] <= entry["heartbeat_utc"]


def test_killed_job_shows_as_interrupted_not_running(killed_sweep: KilledSweep) -> None:
    result = killed_sweep.status_after_kill
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("| 1 |")]
    assert "| interrupted |" in row and "has ended without recording an end state" in row
    assert f"pid {killed_sweep.running_entry['pid']}" in row
    # `status` wrote its judgement back: the files no longer claim job 1 runs.
    states, markdown = killed_sweep.files_after_status
    assert states["1"] == "interrupted"
    assert "| 1 | interrupted |" in markdown


def test_rerun_redoes_only_unfinished_work_and_loses_no_episode(killed_sweep: KilledSweep) -> None:
    sweep, rerun = killed_sweep.sweep, killed_sweep.rerun
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    states = _states(sweep)
    assert states["1"] == "complete"
    assert {states["0"], states["2"]} <= {"complete", "skipped"}
    for job in ("0", "1", "2"):
        keys = _episode_keys(sweep / job)
        # Every episode exactly once: none lost, none run twice (by the killed launch's
        # surviving jobs and the rerun both, or by the resume).
        assert len(keys) == len(set(keys)) == KILL_EPISODES, f"job {job}"
        assert read_json(sweep / job / "results.json")["episodes_expected"] == KILL_EPISODES
        assert (sweep / job / ".piexp" / "complete.json").is_file()
    after = _episode_keys(sweep / "1")
    assert after[: len(killed_sweep.episodes_before)] == killed_sweep.episodes_before
    done = len(killed_sweep.episodes_before)
    assert f"resuming: {done} of {KILL_EPISODES} episodes already done" in _job_logs(sweep)


def test_summarize_and_reproduce_work_on_the_resumed_sweep(killed_sweep: KilledSweep, tmp_path: Path) -> None:
    sweep = killed_sweep.sweep
    summary = run_piexp(tmp_path, "summarize", str(sweep))
    assert summary.returncode == 0, summary.stderr
    rows = (sweep / "runs_summary.csv").read_text().splitlines()[1:]
    assert [row.split(",")[0] for row in rows] == ["0", "1", "2"]
    check = run_piexp(tmp_path, "reproduce", str(sweep / "1"), "--check-only")
    assert check.returncode == 0, check.stderr


def test_running_job_refreshes_its_heartbeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeat thread, at a shorter period than the real one, while a job runs."""
    from piexp.config.compose import load
    from piexp.sweeps import JobInfo, run_tracked, tracking

    monkeypatch.setattr(tracking, "HEARTBEAT_EVERY_S", 0.3)
    seen: list[str] = []

    def run(config, run_dir):  # noqa: ANN001, ANN202
        for _ in range(10):
            seen.append(SweepStatus(tmp_path).read()["jobs"]["0"]["heartbeat_utc"])
            time.sleep(0.3)
        return 1.0

    run_tracked(load(["seed=1"]), tmp_path / "0", JobInfo(num=0, overrides=["seed=1"], sweep_dir=tmp_path), run)
    assert len(set(seen)) >= 2, "the heartbeat was not refreshed while the job ran"
    assert SweepStatus(tmp_path).read()["jobs"]["0"]["state"] == "complete"


def test_job_run_by_another_live_process_is_waited_for_not_run_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What a rerun meets when the killed launcher's jobs still run: the status entry of
    job 0 belongs to a live process (here a real `sleep`); the new job 0 waits for it
    to end before running."""
    import logging

    from piexp.config.compose import load
    from piexp.sweeps import JobInfo, run_tracked
    from piexp.sweeps.liveness import _process_start

    other = subprocess.Popen(["sleep", "3"])
    try:
        SweepStatus(tmp_path).update(
            0,
            state="running",
            host=socket.gethostname(),
            pid=other.pid,
            pid_start=_process_start(other.pid),
            heartbeat_utc=datetime.now(timezone.utc).isoformat(),
        )
        ran_at: list[int | None] = []
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger="piexp.sweeps"):
            run_tracked(
                load(["seed=1"]),
                tmp_path / "0",
                JobInfo(num=0, overrides=["seed=1"], sweep_dir=tmp_path),
                lambda config, run_dir: ran_at.append(other.poll()) or 1.0,
            )
        assert ran_at == [0], "the job ran while the other process still ran it"
        assert time.monotonic() - started >= 2
        assert "Waiting for job 0 (" in caplog.text and f"pid {other.pid}" in caplog.text
    finally:
        other.kill()
        other.wait()


def test_status_judges_stale_and_dead_owners(tmp_path: Path) -> None:
    """Entries as other writers leave them: a job on another node whose heartbeat
    stopped (stale, with the limit), one on this host whose process is gone
    (interrupted), and one this process runs (running)."""
    from piexp.sweeps import Owner

    status = SweepStatus(tmp_path)
    old = "2020-01-01T00:00:00+00:00"
    status.update(
        0, state="running", host="node-that-died", pid=4242, pid_start="1", heartbeat_utc=old, started_utc=old
    )
    dead = subprocess.Popen(["true"])
    dead.wait()
    status.update(1, state="running", host=socket.gethostname(), pid=dead.pid, pid_start="1")
    assert status.claim(2, Owner.current(), overrides=["seed=2"]) is None
    result = run_piexp(tmp_path, "status", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): line for line in result.stdout.splitlines() if line.startswith("| ")}
    assert "| stale |" in rows["0"] and f"limit {STALE_AFTER_S:.0f} s" in rows["0"]
    assert "| interrupted |" in rows["1"] and "has ended" in rows["1"]
    assert "| running |" in rows["2"]


def test_status_of_a_single_run_folder_and_watch(tmp_path: Path) -> None:
    run = tmp_path / "run"
    finished = run_piexp(tmp_path, *SMALL, f"hydra.run.dir={run}")
    assert finished.returncode == 0, finished.stderr[-2000:]
    result = run_piexp(tmp_path, "status", str(run))
    assert result.returncode == 0, result.stderr
    assert "| 0 | complete | 1 |" in result.stdout
    watch = subprocess.Popen(
        [sys.executable, "-m", "piexp", "status", str(run), "--watch", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As a terminal's foreground job: a suite started in the background (`make test &`)
        # hands its children SIGINT ignored, and Python then installs no Ctrl-C handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Redraws every 0.2 s: 10 s leaves room for a slow start on a loaded machine (3 s,
    # the earlier wait, was too short there).
    time.sleep(10)
    watch.send_signal(signal.SIGINT)
    out, err = watch.communicate(timeout=30)
    assert watch.returncode == 0, err
    assert out.count("| 0 | complete |") >= 2, "--watch did not redraw"


def test_status_of_a_folder_without_one_is_one_paragraph_exit_2(tmp_path: Path) -> None:
    result = run_piexp(tmp_path, "status", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("piexp: Cannot show the status") and "Traceback" not in result.stderr


# Shared file systems: several writers, in separate processes, on one sweep folder. -------


def _write_job(sweep: str, job: int, go, failures) -> None:  # noqa: ANN001
    from piexp.sweeps import Owner, write_marker

    status, owner = SweepStatus(Path(sweep)), Owner.current()
    go.wait()
    if status.claim(job, owner, overrides=[f"seed={job}"]) is not None:
        failures.put(f"job {job}: claim refused")
    for _ in range(20):
        if not status.heartbeat(job, owner):
            failures.put(f"job {job}: heartbeat refused")
    write_marker(Path(sweep) / str(job), "hash", metric=float(job), overrides=[f"seed={job}"])
    status.update(job, state="complete", metric=float(job))


def _read_until(sweep: str, stop, failures, reads) -> None:  # noqa: ANN001
    status_json, status_md = Path(sweep) / "sweep_status.json", Path(sweep) / "sweep_status.md"
    count = 0
    while not stop.is_set():
        try:
            json.loads(status_json.read_text())
            markdown = status_md.read_text()
        except FileNotFoundError:
            continue
        except ValueError as error:
            failures.put(f"torn sweep_status.json: {error}")
            continue
        if not (markdown.startswith("# Sweep status") and markdown.endswith("|\n")):
            failures.put(f"torn sweep_status.md: {markdown[-80:]!r}")
        count += 1
    reads.put(count)


def test_concurrent_writers_neither_tear_nor_lose_anything(tmp_path: Path) -> None:
    import multiprocessing

    from piexp.run_folder import RunFolder

    context = multiprocessing.get_context("fork")
    go, stop, failures, reads = context.Event(), context.Event(), context.Queue(), context.Queue()
    writers = [context.Process(target=_write_job, args=(str(tmp_path), job, go, failures)) for job in range(6)]
    reader = context.Process(target=_read_until, args=(str(tmp_path), stop, failures, reads))
    for process in [*writers, reader]:
        process.start()
    go.set()
    for writer in writers:
        writer.join(60)
    stop.set()
    reader.join(30)
    assert all(writer.exitcode == 0 for writer in writers)
    problems = [failures.get() for _ in range(failures.qsize())]
    assert problems == []
    assert reads.get(timeout=5) > 0, "the reader never saw the files"
    jobs = SweepStatus(tmp_path).read()["jobs"]
    assert {num: (entry["state"], entry["metric"]) for num, entry in jobs.items()} == {
        str(job): ("complete", float(job)) for job in range(6)
    }
    assert all(RunFolder(tmp_path / str(job)).completion()["metric"] == float(job) for job in range(6))
    assert not list(tmp_path.rglob("*.tmp")), "a temp file was left behind"


def _claim_once(sweep: str, start, release, results) -> None:  # noqa: ANN001
    from piexp.sweeps import Owner

    start.wait()
    results.put(SweepStatus(Path(sweep)).claim(0, Owner.current()) is None)
    release.wait(30)  # stay alive: the winner's claim holds only while it lives


def test_two_launches_of_one_job_start_it_once(tmp_path: Path) -> None:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    start, release, results = context.Barrier(4), context.Event(), context.Queue()
    claimants = [context.Process(target=_claim_once, args=(str(tmp_path), start, release, results)) for _ in range(4)]
    for process in claimants:
        process.start()
    won = [results.get(timeout=30) for _ in claimants]
    release.set()
    for process in claimants:
        process.join(30)
    assert won.count(True) == 1, won
