"""What a user meets in the first steps with piexp, each as a user meets it: `python -m
piexp` in real subprocesses (one small offline eval of the oracle, made once for the
module): a folder to write into that does not exist yet is made, and a run folder given
on the command line is where a command writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def piexp(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "piexp", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One offline eval of the oracle on two arith tasks (about 20 s on two busy cores)."""
    work = tmp_path_factory.mktemp("first-steps")
    run = work / "oracle"
    done = piexp(
        work,
        "mode=eval",
        "policy=oracle",
        "family=arith",
        "lang=python",
        "tasks.train_per_family=1",
        "tasks.eval_per_family=2",
        "mode.preflight=false",
        f"hydra.run.dir={run}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run


@pytest.mark.parametrize("given", ["views/deeper/run.html", "views/deeper/"], ids=["file", "folder"])
def test_show_html_into_a_missing_folder_makes_it(oracle_run: Path, tmp_path: Path, given: str) -> None:
    """`show RUN --html PATH` whose folder does not exist yet failed with a traceback
    (FileNotFoundError); a PATH ending in `/` names a folder, which gets `viewer.html`."""
    done = piexp(tmp_path, "show", str(oracle_run), "--html", given)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = tmp_path / (given + "viewer.html" if given.endswith("/") else given)
    assert done.stdout.strip() == f"wrote {Path(given) / 'viewer.html' if given.endswith('/') else given}"
    assert expected.is_file() and "<html" in expected.read_text(encoding="utf-8")[:2000].lower()


def test_calibrate_writes_into_hydra_run_dir(tmp_path: Path) -> None:
    """`calibrate ... hydra.run.dir=DIR` ignored DIR and wrote calibration/POLICY into the
    working directory; DIR is its folder now, as `--out DIR` is (about 30 s on two busy cores)."""
    done = piexp(
        tmp_path, "calibrate", "family=arith", "lang=python", "policy=oracle", "levels=1", "n=2", "k=1",
        "hydra.run.dir=cal",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cal"]
    assert (tmp_path / "cal" / "calibration.json").is_file()
    assert (tmp_path / "cal" / "levels" / "arith" / "level-1" / "episodes.jsonl").is_file()
