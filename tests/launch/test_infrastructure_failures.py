"""Infrastructure failures are never results, with real kills of real servers: an oracle
eval whose embedded sandbox server is SIGKILLed mid-run still ends at pass@1 1.0 with
every episode once (the server is restarted, and a second eval beside it loses
nothing); past `sandbox.max_restarts`, or with a remote sandbox that disappears, the
eval stops with exit 4, labelled incomplete and not marked complete, and the same
command then finishes it without playing any episode twice.

Each test runs piexp as a user does (a subprocess); each takes 20-60 s on 2 cores: an
eval large enough that the kill lands mid-run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from piexp.commands.job_summary import summarize_job
from piexp.sandbox.embedded import free_port
from piexp.sweeps.marker import MARKER_PATH
from piexp.transcripts.runs import load_run

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

# 8 families x 3 tasks x 2 languages x k=2: 96 episodes, long enough to kill mid-run.
EVAL = [
    "mode=eval",
    "policy=oracle",
    "family=all",
    "lang=[python,javascript]",
    "tasks.eval_per_family=3",
    "tasks.train_per_family=1",
    "k=2",
    "mode.preflight=false",
    "mode.max_concurrency=4",
]
EPISODES = 8 * 3 * 2 * 2


def _start(run_dir: Path, *overrides: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    return subprocess.Popen(
        [sys.executable, "-m", "piexp", *EVAL, *overrides, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    _out, err = process.communicate(timeout=timeout)
    return process.returncode, err


def _episode_lines(run_dir: Path) -> list[dict]:
    path = run_dir / "episodes.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


def _embedded_server(process: subprocess.Popen[str]) -> int:
    for child in _children(process.pid):
        with open(f"/proc/{child}/cmdline", "rb") as f:
            if b"piexp.sandbox\0serve" in f.read():
                return child
    raise AssertionError("the eval has no embedded sandbox server")


def _kill_after_some_episodes(run_dir: Path, process: subprocess.Popen[str], wait_until, kill) -> int:
    """Wait for 10 finished episodes, then `kill()`; the number finished before it."""
    wait_until("10 finished episodes", lambda: len(_episode_lines(run_dir)) >= 10 or process.poll() is not None,
               timeout=180, every=0.02)  # fmt: skip
    assert process.poll() is None, "the eval ended before the kill: make it larger"
    kill()
    return len(_episode_lines(run_dir))


def _assert_complete_oracle(run_dir: Path) -> None:
    results = json.loads((run_dir / "results.json").read_text())
    assert results["complete"] is True and results["episodes_failed_to_run"] == 0
    assert results["overall"]["pass@1"] == 1.0 and results["overall"]["episodes"] == EPISODES
    lines = _episode_lines(run_dir)
    keys = [(line["task_id"], line["language"], line["sample"]) for line in lines]
    assert len(keys) == len(set(keys)) == EPISODES, "every episode exactly once"
    assert all(line["metrics"]["infrastructure_error"] == 0.0 for line in lines)
    assert (run_dir / MARKER_PATH).exists()


def test_a_killed_embedded_server_is_restarted_and_the_eval_beside_it_loses_nothing(tmp_path, wait_until):
    hit, beside = tmp_path / "hit", tmp_path / "beside"
    hit_run, beside_run = _start(hit), _start(beside)
    server = None

    def kill() -> None:
        nonlocal server
        server = _embedded_server(hit_run)
        os.kill(server, signal.SIGKILL)

    _kill_after_some_episodes(hit, hit_run, wait_until, kill)
    (code, err), (beside_code, beside_err) = _finish(hit_run), _finish(beside_run)
    assert code == 0, err[-3000:]
    assert "killed by SIGKILL; restarted it on port" in err
    _assert_complete_oracle(hit)
    assert beside_code == 0 and "restarted" not in beside_err, beside_err[-3000:]
    _assert_complete_oracle(beside)


def test_past_the_restart_bound_the_eval_stops_incomplete_and_the_same_command_finishes_it(tmp_path, wait_until):
    run_dir = tmp_path / "run"
    first = _start(run_dir, "sandbox.max_restarts=0")
    done_before = _kill_after_some_episodes(
        run_dir, first, wait_until, lambda: os.kill(_embedded_server(first), signal.SIGKILL)
    )
    code, err = _finish(first)
    assert code == 4, err[-3000:]
    assert "sandbox.max_restarts=0" in err and "Traceback" not in err
    assert "not marked complete" in " ".join(err.split())
    results = json.loads((run_dir / "results.json").read_text())
    assert results["complete"] is False and results["episodes_failed_to_run"] > 0
    assert results["overall"]["pass@1"] == 1.0, "no episode was scored for the sandbox's failure"
    assert "INCOMPLETE" in (run_dir / "results.md").read_text()
    assert not (run_dir / MARKER_PATH).exists()
    summary = summarize_job(run_dir, run_dir, {})  # what `piexp summarize` shows of it
    assert summary.state == "incomplete" and summary.not_run == results["episodes_failed_to_run"]
    (note,) = load_run(run_dir).incomplete  # what `piexp show` prints first and the viewer's banner says
    assert note.startswith(f"INCOMPLETE: {results['episodes_failed_to_run']} of {EPISODES} episodes")
    assert note in (run_dir / "viewer.html").read_text()
    kept = _episode_lines(run_dir)
    assert len(kept) >= done_before

    code, err = _finish(_start(run_dir, "sandbox.max_restarts=0"))
    assert code == 0, err[-3000:]
    _assert_complete_oracle(run_dir)
    assert _episode_lines(run_dir)[: len(kept)] == kept, "the finished episodes were kept, not played again"


def _serve(port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "piexp.sandbox", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return server


def _stop(server: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    server.wait()


def test_a_remote_sandbox_that_disappears_stops_the_eval_and_a_rerun_finishes_it(tmp_path, wait_until):
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}/run_code"

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/v1/ping", timeout=1, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    server = _serve(port)
    try:
        wait_until("the remote sandbox", answers, timeout=60)
        run_dir = tmp_path / "run"
        remote = ["sandbox=remote", f"sandbox.url={url}", "sandbox.unavailable_after_s=3"]
        first = _start(run_dir, *remote)
        started = time.monotonic()
        _kill_after_some_episodes(run_dir, first, wait_until, lambda: _stop(server))
        code, err = _finish(first)
        assert code == 4, err[-3000:]
        assert "did not answer its health check for 3 s" in " ".join(err.split()) and "Traceback" not in err
        assert time.monotonic() - started < 120, "the eval stopped instead of scoring failures"
        assert json.loads((run_dir / "results.json").read_text())["complete"] is False
        assert not (run_dir / MARKER_PATH).exists()

        server = _serve(port)
        wait_until("the remote sandbox again", answers, timeout=60)
        code, err = _finish(_start(run_dir, *remote))
        assert code == 0, err[-3000:]
        _assert_complete_oracle(run_dir)
    finally:
        _stop(server)
