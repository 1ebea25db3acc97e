"""The tests' job launcher (tests/job_launcher.py) gives what a fresh `python -m piexp`
gives: the same exit status, streams and run folder for a job and for a refusal, a
timeout that kills the job, and a fresh interpreter wherever the environment differs in
something the launcher's imports fixed (PYTHONPATH, applied per job, is exercised by the user
families' tests, whose families import from it). Many tests trust it to stand for the
command line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import job_launcher
from tests.job_launcher import forkable, run_piexp

SMALL_EVAL = ["mode=eval", "policy=wrong", "family=arith", "lang=python", "tasks.train_per_family=1",
              "tasks.eval_per_family=3", "mode.preflight=false"]  # fmt: skip


def _fresh(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "piexp", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _comparable(run: Path) -> dict:
    """A run folder's results and manifest without what differs between any two runs."""
    results = json.loads((run / "results.json").read_text())
    results.pop("wall_s")
    manifest = json.loads((run / "manifest.json").read_text())
    volatile = {"created_utc"}
    return {
        "results": results,
        "manifest": {key: value for key, value in manifest.items() if key not in volatile},
        "files": sorted(path.name for path in run.iterdir()),
    }


def test_a_forked_job_gives_the_run_and_the_streams_a_fresh_interpreter_gives(tmp_path: Path) -> None:
    forked = run_piexp(*SMALL_EVAL, f"hydra.run.dir={tmp_path / 'forked'}", cwd=tmp_path, timeout=300)
    fresh = _fresh(*SMALL_EVAL, f"hydra.run.dir={tmp_path / 'fresh'}", cwd=tmp_path)
    assert job_launcher._launcher is not None, "the job was not forked"
    assert forked.returncode == fresh.returncode == 0, forked.stderr[-3000:] + fresh.stderr[-3000:]
    assert _comparable(tmp_path / "forked") == _comparable(tmp_path / "fresh")
    # The same console lines, apart from the run folder's name.
    assert forked.stdout.replace("forked", "RUN") == fresh.stdout.replace("fresh", "RUN")


def test_a_refusal_is_the_same_paragraph_and_exit_status_either_way(tmp_path: Path) -> None:
    forked = run_piexp("mode=eval", "lang=cobol", f"hydra.run.dir={tmp_path / 'a'}", cwd=tmp_path, timeout=300)
    fresh = _fresh("mode=eval", "lang=cobol", f"hydra.run.dir={tmp_path / 'a'}", cwd=tmp_path)
    assert forked.returncode == fresh.returncode == 2
    assert forked.stderr == fresh.stderr and "Traceback" not in forked.stderr
    assert not (tmp_path / "a").exists()


def test_a_job_whose_folder_holds_another_piexp_runs_that_one_as_a_fresh_interpreter_does(tmp_path: Path) -> None:
    """The launcher holds piexp's tokenizer package imported; a job whose sys.path finds
    another piexp first (its working folder's) must not get the launcher's."""
    other = tmp_path / "piexp"
    other.mkdir()
    (other / "__init__.py").write_text("")
    (other / "__main__.py").write_text(
        "import piexp, piexp.tokenizer\nprint(piexp.__file__)\nprint(piexp.tokenizer.__file__)\n"
    )
    (other / "tokenizer.py").write_text("")
    forked = run_piexp(cwd=tmp_path, timeout=300)
    fresh = _fresh(cwd=tmp_path)
    assert job_launcher._launcher is not None, "the job was not forked"
    assert forked.returncode == fresh.returncode == 0, forked.stderr + fresh.stderr
    assert forked.stdout == fresh.stdout == f"{other / '__init__.py'}\n{other / 'tokenizer.py'}\n"


def test_a_job_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_piexp(*SMALL_EVAL, "tasks.eval_per_family=400", f"hydra.run.dir={tmp_path / 'long'}", timeout=1)
    # The launcher serves the next job.
    done = run_piexp("mode=eval", "lang=cobol", timeout=300)
    assert done.returncode == 2


def _launcher_modules() -> set[str]:
    """The modules the launcher has imported before it forks (its preload, in a fresh
    interpreter)."""
    probe = "import sys, tests.job_launcher as launcher; launcher.preload(); print(' '.join(sys.modules))"
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def test_only_piexp_s_own_variables_and_pythonpath_may_differ_from_the_launcher() -> None:
    base = {"HOME": "/root", "PATH": "/usr/bin", "LANG": "C.UTF-8"}
    assert forkable({**base, "PIEXP_CACHE_DIR": "/x", "PYTHONPATH": "/y", "TINKER_API_KEY": "k"}, base)
    assert forkable(dict(base), {**base, "PIEXP_SWEEP_FAIL_JOBS": "1"})
    # Ray, W&B and torch's compiler are not among the launcher's imports: the job's own
    # import reads their variables.
    assert forkable({**base, "RAY_CLIENT_MODE": "0", "PYTEST_CURRENT_TEST": "t (call)", "WANDB_MODE": "offline"}, base)
    assert forkable({**base, "TORCHINDUCTOR_CACHE_DIR": "/c"}, base)
    for name in ("ray", "wandb", "torch._inductor"):
        assert name not in _launcher_modules(), name
    # What an imported package may have read at import: a fresh interpreter.
    for key, value in (("HOME", "/tmp/h"), ("TZ", "Asia/Kolkata"), ("PYTHONHASHSEED", "1"), ("HF_HOME", "/h")):
        assert not forkable({**base, key: value}, base), key
    assert not forkable({k: v for k, v in base.items() if k != "LANG"}, base)


def test_a_test_that_hangs_up_before_sending_its_job_leaves_the_launcher_serving() -> None:
    """The launcher is one loop for a worker's jobs: a client gone mid-message must not stall it."""
    assert run_piexp("mode=eval", "lang=cobol", timeout=300).returncode == 2  # the launcher is up
    assert job_launcher._launcher is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(job_launcher._launcher.socket_path)
        client.sendall(b'{"module": "piexp"')  # no newline: the message never ends
    done = run_piexp("mode=eval", "lang=cobol", timeout=120)
    assert done.returncode == 2 and "cobol" in done.stderr
