"""A training run on `service=local model=tiny-local` whose embedded sandbox server is
killed with SIGKILL while it trains: the supervisor restarts the server, the run
finishes every step (exit 0, marked complete), no episode it trained on carries an
infrastructure error, and the step metrics count the restart. Slow: a local SkyRL
server and two RL steps, about 3-5 minutes on 2 CPU cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from piexp.sandbox.availability import answers_ping
from piexp.sweeps.marker import MARKER_PATH
from piexp.transcripts.store import TRAIN_TRANSCRIPTS, read_transcripts

pytestmark = pytest.mark.slow

OVERRIDES = [
    "service=local", "model=tiny-local", "family=arith", "lang=python",
    "tasks.train_per_family=2", "tasks.eval_per_family=1",
    "mode.group_size=2", "mode.groups_per_batch=2", "mode.max_steps=2", "mode.save_every=0", "mode.eval_every=0",
    "mode.preflight=false", "limits.max_turns=4", "limits.max_generation_tokens=512",
    "warm_start.sft_steps=1", "warm_start.tasks=1",
]  # fmt: skip


def _sandbox_server(pid: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"piexp.sandbox\0serve" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def _answers(server: int) -> bool:
    """Whether the sandbox server `server` answers its ping: the run's supervisor has then
    seen it start (or sees it within its next ping), so a kill from here on is a death
    during the run, not a failed start."""
    try:
        argv = (Path("/proc") / str(server) / "cmdline").read_bytes().split(b"\0")
        fd = argv[argv.index(b"--listen-fd") + 1].decode()
        inode = os.readlink(f"/proc/{server}/fd/{fd}").removeprefix("socket:[").rstrip("]")
        rows = [line.split() for line in Path(f"/proc/{server}/net/tcp").read_text().splitlines()[1:]]
        port = next(int(row[1].rsplit(":", 1)[1], 16) for row in rows if row[9] == inode)
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return answers_ping(f"http://127.0.0.1:{port}/run_code", timeout_s=2.0)


def test_a_sandbox_killed_during_training_is_restarted_and_no_episode_is_scored_on_it(
    server_venv: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """Slow (minutes): a local server, a warm start and two RL steps, with a real kill."""
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    process = subprocess.Popen([sys.executable, "-m", "piexp", *OVERRIDES, f"hydra.run.dir={run_dir}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(process.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    killed = None
    deadline = time.monotonic() + 900
    while process.poll() is None and time.monotonic() < deadline:
        # The sandbox starts after the local server. A kill before it first answers would
        # be a failed start (retried under another message), so wait for its answer: on a
        # busy machine that can take longer than the two seconds once waited here.
        server = _sandbox_server(process.pid) if killed is None else None
        if server is not None and _answers(server):
            time.sleep(2.0)  # the warm start and the first RL step use the sandbox from here on
            killed = server
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.2)
    process.wait(timeout=60)
    reader.join(timeout=10)
    text = "".join(err)
    assert process.returncode == 0, text[-6000:]
    # Console lines wrap at the console's width, wherever a long temporary path puts them.
    assert killed is not None, "the run's embedded sandbox server never answered:\n" + text[-3000:]
    assert "killed by SIGKILL; restarted it on port" in " ".join(text.split())
    assert (run_dir / MARKER_PATH).exists()
    trained_on = list(read_transcripts(run_dir / TRAIN_TRANSCRIPTS))
    assert len(trained_on) == 2 * 2 * 2  # steps x groups x group size
    assert all(t["metrics"]["infrastructure_error"] == 0.0 for t in trained_on)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    restarts = [value for row in rows for key, value in row.items() if key.endswith("sandbox_restarts")]
    assert restarts and max(restarts) >= 1.0, sorted({key for row in rows for key in row})
