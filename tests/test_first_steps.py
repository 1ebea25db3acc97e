"""What a user meets in the first steps with piexp, each as a user meets it: `python -m
piexp` in real subprocesses (one small offline eval of the oracle, made once for the
module, and one of `wrong`): a folder to write into that does not exist yet is made, a
run folder given on the command line is where a command writes, and the README's
reward-weight example shows rows that differ."""

from __future__ import annotations

import json
import os
import shlex
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


REPO = Path(__file__).resolve().parents[1]


def small_eval(work: Path, policy: str) -> Path:
    run = work / policy
    done = piexp(
        work,
        "mode=eval",
        f"policy={policy}",
        "family=arith",
        "lang=python",
        "tasks.train_per_family=1",
        "tasks.eval_per_family=2",
        "mode.preflight=false",
        f"hydra.run.dir={run}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One offline eval of the oracle on two arith tasks (about 20 s on two busy cores)."""
    return small_eval(tmp_path_factory.mktemp("first-steps"), "oracle")


@pytest.mark.parametrize(
    "given", ["views/deeper/run.html", "views/deeper/", "views/named"], ids=["file", "folder", "no-suffix"]
)
def test_show_html_into_a_missing_folder_makes_it(oracle_run: Path, tmp_path: Path, given: str) -> None:
    """`show RUN --html PATH` whose folder does not exist yet failed with a traceback
    (FileNotFoundError); a PATH ending in `/` names a folder, which gets `viewer.html`, and
    so does a PATH without the `.html` suffix (it wrote a file a browser would not open)."""
    done = piexp(tmp_path, "show", str(oracle_run), "--html", given)
    assert done.returncode == 0, done.stderr[-3000:]
    written = given if given.endswith(".html") else str(Path(given) / "viewer.html")
    assert done.stdout.strip() == f"wrote {written}"
    expected = tmp_path / written
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


def _rescored_means(run: Path) -> list[float]:
    (report,) = sorted(run.glob("rescore-*/rescore.json"))[-1:]
    return [setting["mean"] for setting in json.loads(report.read_text(encoding="utf-8"))["settings"]]


def test_the_readme_reward_weight_example_gives_rows_that_differ(tmp_path: Path) -> None:
    """The README rescored `outputs/wrong` under reward.weights.output=0.4,0.6,0.8: three
    identical rows (0.300), since `wrong` never prints the answer and full marks are 1.0
    whatever the weights. Its example is one whose rows differ (about 20 s)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (line,) = [line for line in readme.splitlines() if line.startswith("python -m piexp rescore outputs/wrong")]
    words = shlex.split(line.split("#", 1)[0])[3:]
    wrong = small_eval(tmp_path, "wrong")
    done = piexp(tmp_path, *[str(wrong) if word == "outputs/wrong" else word for word in words])
    assert done.returncode == 0, done.stderr[-3000:]
    means = _rescored_means(wrong)
    assert len(means) == 3 and len(set(means)) == 3, means


def test_full_marks_are_one_whatever_the_weights(oracle_run: Path) -> None:
    """docs/concepts.md's rule: an episode in which all four steps hold earns 1.0 under any
    weights, so the oracle's rows of a weight sweep are all 1.0."""
    concepts = " ".join((REPO / "docs" / "concepts.md").read_text(encoding="utf-8").split())
    assert "Full marks are 1.0 whatever the weights" in concepts
    done = piexp(oracle_run.parent, "rescore", str(oracle_run), "reward.weights.output=0.3,0.9")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _rescored_means(oracle_run) == [1.0, 1.0]
