"""A whole offline run as a user starts it: what its folder holds, and that no secret
from the environment leaks into any file of it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from tests.job_launcher import run_piexp

CANARY = "sk-canary-0123456789abcdef"


def test_offline_eval_run_folder_is_complete_and_secret_free(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "TINKER_API_KEY": CANARY, "WANDB_API_KEY": CANARY + "-wandb"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "piexp",
            "mode=eval",
            "policy=oracle",
            "family=arith,dates",
            "lang=python,javascript",
            "tasks.train_per_family=2",
            "tasks.eval_per_family=2",
            "mode.preflight=false",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in (
        ".hydra/config.yaml",
        ".hydra/overrides.yaml",
        "manifest.json",
        "results.json",
        "results.md",
        "results.png",
        "transcripts.jsonl.gz",
        "viewer.html",
    ):
        assert (run_dir / name).is_file(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["seed"] == 0
    assert len(manifest["task_digests"]["train"]) == 4 and len(manifest["task_digests"]["eval"]) == 4
    assert manifest["overlap_report"]
    assert "git_commit" in manifest and "packages" in json.dumps(manifest)
    for path in run_dir.rglob("*"):
        if path.is_file():
            # Compressed files (transcripts) are read decompressed: a leak would hide in them.
            content = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            assert CANARY.encode() not in content, f"secret leaked into {path}"
    assert CANARY not in result.stdout + result.stderr
    # job.log holds what the console showed (plain text), and
    # without a terminal the progress is a plain line, not escape codes.
    log = (run_dir / "job.log").read_text()
    for shown in ("eval oracle: 8/8 episodes (100%)", "pass@1 (oracle", "results.md, results.png"):
        assert shown in log and shown in result.stderr, shown
    assert "\x1b[" not in log + result.stderr


def test_progress_without_a_terminal_is_a_plain_line_with_what_is_left(monkeypatch, capsys) -> None:
    import piexp.console as piexp_console

    monkeypatch.setattr(piexp_console, "PLAIN_PROGRESS_EVERY_S", 0.0)
    with piexp_console.ProgressReport("eval model", 4) as progress:
        progress.advance()
        progress.advance(note="arith x python")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("eval model: 1/4 episodes (25%), 0:00:00 elapsed, ~") and lines[0].endswith(" left")
    assert lines[1].endswith("(arith x python)") and lines[-1].startswith("eval model: 2/4 episodes (50%)")


def test_progress_says_a_line_on_time_while_nothing_finishes(monkeypatch, capsys) -> None:
    """A log that says nothing for minutes (a slow sample call, a training step) reads as a
    hung run: the line comes every PLAIN_PROGRESS_EVERY_S seconds whether or not an item
    finished (about 2 s)."""
    import time

    import piexp.console as piexp_console

    monkeypatch.setattr(piexp_console, "PLAIN_PROGRESS_EVERY_S", 0.5)
    with piexp_console.ProgressReport("training", 3, unit="steps", live=False):
        time.sleep(2.2)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3 and all(line.startswith("training: 0/3 steps (0%)") for line in lines)


# A rerun with another config must not corrupt a finished folder.

SMALL = ["mode=eval", "tasks.train_per_family=1", "tasks.eval_per_family=1", "mode.preflight=false", "lang=python"]


def _piexp(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "PIEXP_SWEEP_FAIL_JOBS")}
    return run_piexp(*args, cwd=cwd, env=env, timeout=300)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def _assert_refused(result: subprocess.CompletedProcess[str], folder: Path, *keys: str) -> None:
    text = " ".join(result.stderr.split())
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert f"{folder} already holds a different run" in text, text
    for key in keys:
        assert key in text, (key, text)
    assert "--replace" in text and "new folder" in text


def test_a_finished_folder_is_never_overwritten_by_another_config(tmp_path: Path) -> None:
    run_dir = tmp_path / "R"
    first = _piexp(tmp_path, *SMALL, "policy=oracle", "family=arith", f"hydra.run.dir={run_dir}")
    assert first.returncode == 0, first.stderr[-2000:]
    before = _snapshot(run_dir)
    # Another policy and family (the reported case), a check run and a train run: all
    # refused before a single file changes.
    for args, keys in (
        (["mode=eval", "policy=guess", "family=dates"], ("family.arith", "family.dates", "policy")),
        (["mode=check", "family=arith", "lang=python"], ("mode.name",)),
        (["service=local", "model=tiny-local", "family=arith"], ("mode.name", "model.name")),
    ):
        result = _piexp(tmp_path, *args, f"hydra.run.dir={run_dir}")
        _assert_refused(result, run_dir, *keys)
        assert _snapshot(run_dir) == before, f"{args} changed the folder"
    # The same config resumes (skips: it is complete).
    same = _piexp(tmp_path, *SMALL, "policy=oracle", "family=arith", f"hydra.run.dir={run_dir}")
    assert same.returncode == 0 and "Skipping run" in same.stdout + same.stderr, same.stderr[-2000:]
    before = _snapshot(run_dir)
    # --replace moves the old folder aside, whole, and runs afresh.
    replaced = _piexp(tmp_path, *SMALL, "policy=guess", "family=dates", f"hydra.run.dir={run_dir}", "--replace")
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    (aside,) = tmp_path.glob("R.replaced-*")
    assert f"moved {run_dir} aside to {aside}" in replaced.stderr
    assert {k: v for k, v in _snapshot(aside).items() if not k.startswith(".piexp/")} == {
        k: v for k, v in before.items() if not k.startswith(".piexp/")
    }
    assert "policy: guess" in (run_dir / ".hydra" / "config.yaml").read_text()
    assert "Eval results: guess" in (run_dir / "results.md").read_text()


def test_sweep_jobs_and_reproduce_refuse_a_folder_of_another_run(tmp_path: Path) -> None:
    sweep = tmp_path / "S"
    first = _piexp(tmp_path, "-m", *SMALL, "policy=oracle", "family=arith", "seed=0,1", f"hydra.sweep.dir={sweep}")
    assert first.returncode == 0, first.stderr[-2000:]
    before = _snapshot(sweep)
    changed = _piexp(tmp_path, "-m", *SMALL, "policy=guess", "family=arith", "seed=0,1", f"hydra.sweep.dir={sweep}")
    _assert_refused(changed, sweep / "0", "policy: 'oracle' -> 'guess'", "1 more job folder")
    assert _snapshot(sweep) == before
    # A smaller sweep into the same folder keeps only its own job in the status table.
    fewer = _piexp(tmp_path, "-m", *SMALL, "policy=oracle", "family=arith", "seed=0", f"hydra.sweep.dir={sweep}")
    assert fewer.returncode == 0, fewer.stderr[-2000:]
    status = (sweep / "sweep_status.md").read_text()
    assert set(json.loads((sweep / "sweep_status.json").read_text())["jobs"]) == {"0"}
    assert "\n| 0 | skipped |" in status and "\n| 1 |" not in status
    assert "started (UTC)" in status and "ended (UTC)" in status
    # reproduce into a folder that holds another run: refused, nothing written there.
    other = sweep / "1"
    before_other = _snapshot(other)
    result = _piexp(tmp_path, "reproduce", str(sweep / "0"), f"hydra.run.dir={other}")
    _assert_refused(result, other, "seed: 1 -> 0")
    assert _snapshot(other) == before_other and not (other / "reproduces.json").exists()


def test_training_longer_in_the_same_folder_is_a_continuation_not_another_run(tmp_path: Path) -> None:
    """A train run rerun with a larger mode.max_steps resumes from its checkpoint (the
    slow local-training test does it for real); fewer steps, or any other change, is
    another run and refused."""
    from omegaconf import OmegaConf

    from piexp.config.compose import load
    from piexp.launch.folder_guard import folder_conflict

    base = ["service=local", "model=tiny-local", "family=arith", "lang=python"]
    (tmp_path / ".hydra").mkdir()
    held = load([*base, "mode.max_steps=2"]).model_dump(mode="json")
    (tmp_path / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(held)))
    assert folder_conflict(tmp_path, load([*base, "mode.max_steps=3"])) is None
    assert "mode.max_steps: 2 -> 1" in folder_conflict(tmp_path, load([*base, "mode.max_steps=1"]))
    assert "seed: 0 -> 5" in folder_conflict(tmp_path, load([*base, "mode.max_steps=3", "seed=5"]))
    eval_run = load(["mode=eval", "policy=oracle", "family=arith", "lang=python"])
    assert "mode.name" in folder_conflict(tmp_path, eval_run) or "mode" in folder_conflict(tmp_path, eval_run)


# The folders only Hydra can name (a custom hydra.sweep.subdir, jobs past the ones the
# command line check validates) are checked inside the job, before Hydra or piexp write
# anything into them.


def _files_and_times(folder: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every path under `folder`: a file's bytes and modification time, a folder as None."""
    return {
        str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns) if path.is_file() else None
        for path in sorted(folder.rglob("*"))
    }


def _job_folders(sweep: Path) -> dict[str, dict[str, tuple[bytes, int] | None]]:
    return {path.name: _files_and_times(path) for path in sorted(sweep.iterdir()) if path.is_dir()}


def _assert_refused_in_job(result: subprocess.CompletedProcess[str], folder: Path, *keys: str) -> None:
    """A sweep job refused by the in-job check: the sweep goes on and exits 1 at the end."""
    text = " ".join(result.stderr.split())
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"FAILED: {folder} already holds a different run" in text, text[-3000:]
    for key in (*keys, "--replace", "nothing was written"):
        assert key in text, (key, text[-3000:])


def test_sweep_job_folders_under_a_custom_subdir_are_never_overwritten(tmp_path: Path) -> None:
    sweep, subdir = tmp_path / "S", "hydra.sweep.subdir=seed_${seed}"
    first = _piexp(
        tmp_path, "-m", *SMALL, "policy=oracle", "family=arith", "seed=0,1", f"hydra.sweep.dir={sweep}", subdir
    )
    assert first.returncode == 0, first.stderr[-2000:]
    before = _job_folders(sweep)
    assert set(before) == {"seed_0", "seed_1"} and "job.log" in before["seed_0"]
    changed = _piexp(
        tmp_path, "-m", *SMALL, "policy=guess", "family=arith", "seed=0,1", f"hydra.sweep.dir={sweep}", subdir
    )
    _assert_refused_in_job(changed, sweep / "seed_0", "policy: 'oracle' -> 'guess'")
    assert f"{sweep / 'seed_1'} already holds a different run" in " ".join(changed.stderr.split())
    assert _job_folders(sweep) == before, "a refused job changed its folder"
    # The same config resumes: both jobs are complete, so both are skipped.
    same = _piexp(
        tmp_path, "-m", *SMALL, "policy=oracle", "family=arith", "seed=0,1", f"hydra.sweep.dir={sweep}", subdir
    )
    assert same.returncode == 0, same.stderr[-2000:]
    assert "Skipping job 0" in same.stdout and "Skipping job 1" in same.stdout
    before = {name: {k: v for k, v in files.items() if k != "job.log"} for name, files in _job_folders(sweep).items()}
    # --replace moves each job folder aside, whole, and runs afresh.
    replaced = _piexp(
        tmp_path,
        "-m",
        *SMALL,
        "policy=guess",
        "family=arith",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
        subdir,
        "--replace",
    )
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    for name in ("seed_0", "seed_1"):
        (aside,) = sweep.glob(f"{name}.replaced-*")
        assert f"moved {sweep / name} aside to {aside}" in replaced.stderr
        assert {k: v for k, v in _files_and_times(aside).items() if k != "job.log"} == before[name]
        assert "policy: guess" in (sweep / name / ".hydra" / "config.yaml").read_text()
        assert "Eval results: guess" in (sweep / name / "results.md").read_text()


def _piexp_checking_only_the_first_job(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, with the command line check limited to a sweep's first job (instead of
    256: a real 257-job sweep takes too long for a test), so job 1 is past it."""
    code = (
        "import sys; import piexp.config.compose as compose; compose.MAX_VALIDATED_SWEEP_JOBS = 1; "
        "from piexp.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "PIEXP_SWEEP_FAIL_JOBS")}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_a_sweep_job_past_the_validated_ones_never_overwrites_its_folder(tmp_path: Path) -> None:
    sweep = tmp_path / "S"
    first = _piexp_checking_only_the_first_job(
        tmp_path, "-m", *SMALL, "policy=oracle", "family=arith", "seed=0,1", f"hydra.sweep.dir={sweep}"
    )
    assert first.returncode == 0, first.stderr[-2000:]
    before = _job_folders(sweep)
    # Job 0 is the same run (skipped); job 1 (policy guess, seed 0) is not what folder 1
    # holds (oracle, seed 1), and only the job itself can see that.
    changed = _piexp_checking_only_the_first_job(
        tmp_path, "-m", *SMALL, "family=arith", "seed=0", "policy=oracle,guess", f"hydra.sweep.dir={sweep}"
    )
    _assert_refused_in_job(changed, sweep / "1", "policy: 'oracle' -> 'guess'", "seed: 1 -> 0")
    assert "sweep job 1 " in changed.stderr and "Skipping job 0" in changed.stdout
    assert {name: files for name, files in _job_folders(sweep).items()} == {
        **before,
        "0": _files_and_times(sweep / "0"),
    }
    assert _files_and_times(sweep / "1") == before["1"], "the refused job changed its folder"
    replaced = _piexp_checking_only_the_first_job(
        tmp_path, "-m", *SMALL, "family=arith", "seed=0", "policy=oracle,guess", f"hydra.sweep.dir={sweep}", "--replace"
    )
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    (aside,) = sweep.glob("1.replaced-*")
    assert _files_and_times(aside) == before["1"]
    assert "policy: guess" in (sweep / "1" / ".hydra" / "config.yaml").read_text()


def test_settings_that_make_hydra_write_into_a_job_folder_first_are_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "R"
    for setting, named in (
        ("hydra.output_subdir=.record", "hydra.output_subdir"),
        ("hydra/job_logging=default", "hydra/job_logging"),
    ):
        result = _piexp(tmp_path, *SMALL, "policy=oracle", "family=arith", f"hydra.run.dir={run_dir}", setting)
        text = " ".join(result.stderr.split())
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert text.startswith(f"piexp: {named}") and "writes" in text, text
        assert not run_dir.exists()
