"""A run outlives its console: output piped into `head` or a pager that closes early must
not end an eval (rich's console exits 1 at the first line it cannot write, and the run
would be lost with no results and no message). The console goes quiet, the run writes
everything, and why the console went is said on the other stream and in job.log."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from piexp import console
from piexp.sweeps.tracking import _error_text

SMALL_EVAL = [
    "mode=eval",
    "policy=oracle",
    "family=arith",
    "lang=python",
    "tasks.train_per_family=1",
    "tasks.eval_per_family=2",
]


def test_an_eval_piped_into_head_finishes_and_writes_its_results(tmp_path: Path) -> None:
    """`2>&1 | head -3` closes both streams after the preflight's first lines (about 15 s)."""
    run = tmp_path / "run"
    command = " ".join([sys.executable, "-m", "piexp", *SMALL_EVAL, f"hydra.run.dir={run}"])
    environment = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    result = subprocess.run(
        ["bash", "-c", f"{command} 2>&1 | head -3; exit ${{PIPESTATUS[0]}}"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(result.stdout.splitlines()) == 3
    results = json.loads((run / "results.json").read_text())
    assert results["overall"]["pass@1"] == 1.0
    log = (run / "job.log").read_text()
    assert "closed by its reader" in log and "the run goes on" in log
    assert "wrote " in log  # the closing line, written after the console went
    status = json.loads((run / ".piexp" / "sweep_status.json").read_text())
    assert status["jobs"]["0"]["state"] == "complete"


def test_a_stream_whose_reader_went_is_quiet_and_the_other_one_says_why() -> None:
    """A real pipe whose read end is closed: writing to it raises BrokenPipeError, which the
    wrapper turns into silence (its descriptor now leads to /dev/null) and one note on the
    stream that is still open."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    broken = os.fdopen(write_end, "w", buffering=1)
    other = io.StringIO()
    saved = dict(console._surviving)
    try:
        console._surviving.clear()
        wrapped = console._surviving["stdout"] = console._OutlivesItsReader(broken, "stdout")
        console._surviving["stderr"] = console._OutlivesItsReader(other, "stderr")  # type: ignore[arg-type]
        assert wrapped.write("a line\n") == len("a line\n")
        wrapped.flush()
        assert wrapped.gone
        assert wrapped.write("more\n") == len("more\n")
        wrapped.flush()
        assert other.getvalue().count("stdout was closed by its reader") == 1
        assert os.readlink(f"/proc/self/fd/{broken.fileno()}") == os.devnull
    finally:
        console._surviving.clear()
        console._surviving.update(saved)
        broken.close()


def test_status_reasons_read_as_sentences() -> None:
    """A job ended by SystemExit(1) was shown in `status` with the reason `1`."""
    assert _error_text(SystemExit(1)) == "the job exited with status 1 before it finished"
    assert _error_text(RuntimeError()) == "RuntimeError (an error without a message)"
    assert _error_text(OSError(5)) == "OSError 5 (an error without a message)"
    assert _error_text(ValueError("the sandbox could not start")) == "the sandbox could not start"
