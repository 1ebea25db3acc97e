"""Eval, check and compare results go to Weights & Biases through tinker-cookbook's
`ml_log` when a project is set: real `wandb` in offline mode (`WANDB_MODE=offline`), the
run's records read back from the files it writes: the metrics (pass@k per family x
language, the check's verdict, the comparison's differences), the tables, and the
viewer as an artifact, into the run folder's `wandb/` (as a training run's). Without a
project nothing is logged; without credentials (and not offline) a run is refused before
it does anything."""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

from piexp.launch.result_logging import LOG_SUBDIR
from tests.job_launcher import run_piexp

SMALL = ["family=arith,dates", "lang=python", "tasks.eval_per_family=2", "tasks.train_per_family=1"]


def _piexp(cwd: Path, *args: str, offline: bool = True, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "WANDB_API_KEY", "WANDB_MODE", "NETRC")}
    if offline:
        env["WANDB_MODE"] = "offline"
    if home is not None:
        env["HOME"] = str(home)  # no ~/.netrc: no `wandb login` credentials either
    done = run_piexp(*args, cwd=cwd, env=env, timeout=300)
    if offline:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


def _records(folder: Path) -> dict:
    """What the offline W&B run under `folder` recorded: history items, tables, artifacts."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    # RUN/wandb/offline-run-*, as wandb names the runs in the folder it is given.
    (path,) = glob.glob(str(folder / LOG_SUBDIR / "offline-run-*" / "run-*.wandb"))
    store = datastore.DataStore()
    store.open_for_scan(path)
    history: dict[str, object] = {}
    artifacts: list[tuple[str, str]] = []
    run: dict[str, object] = {}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.update(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
        elif kind == "artifact":
            artifacts.append((record.artifact.name, record.artifact.type))
        elif kind == "run":
            run["name"] = record.run.display_name
            run.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
    return {"history": history, "artifacts": artifacts, "run": run}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wandb")
    folders = {name: root / name for name in ("oracle", "wrong", "check", "plain", "compare")}
    done = _piexp(root, "mode=eval", "policy=oracle", *SMALL, "mode.preflight=false", "mode.wandb_project=piexp-test",
                  f"hydra.run.dir={folders['oracle']}")  # fmt: skip
    (root / "oracle.stderr").write_text(done.stderr)
    _piexp(root, "mode=eval", "policy=wrong", *SMALL, "mode.preflight=false", f"hydra.run.dir={folders['wrong']}")
    _piexp(root, "mode=check", *SMALL, "mode.oracle_tasks_per_cell=1", "mode.wandb_project=piexp-test",
           f"hydra.run.dir={folders['check']}")  # fmt: skip
    _piexp(root, "compare", str(folders["wrong"]), str(folders["oracle"]), "--out", str(folders["compare"]),
           "--wandb-project", "piexp-test")  # fmt: skip
    return folders


def test_an_eval_logs_pass_at_k_per_cell_its_table_and_its_viewer(runs):
    records = _records(runs["oracle"])
    history = records["history"]
    assert history["overall/pass@1"] == 1.0 and history["pass@1/arith/python"] == 1.0
    assert history["pass@1/dates/python"] == 1.0 and history["reward_shaped/arith/python"] == 1.0
    assert history["pass_at_k/nrows"] == 2 and history["pass_at_k/_type"] == "table-file"
    assert (f"{runs['oracle'].name}-eval", "piexp-eval") in records["artifacts"]
    # The W&B run names the harness that played its episodes (its version, for one that has one).
    assert records["run"]["name"] == f"{runs['oracle'].name} builtin"
    assert records["run"]["harness_identity"] == {"name": "builtin"}, records["run"]


def test_a_check_logs_its_verdict(runs):
    history = _records(runs["check"])["history"]
    assert history["check/passed"] == 1.0 and history["check/oracle_pass_rate"] == 1.0
    assert history["check/violations"] == 0.0 and history["expectations_met/nrows"] > 0


def test_a_comparison_logs_its_differences(runs):
    history = _records(runs["compare"])["history"]
    (key,) = [k for k in history if k.startswith("diff_pass@1/")]
    assert history[key] == pytest.approx(1.0), "oracle against wrong: +1.0 pass@1"
    assert history["differences/nrows"] >= 3  # overall and each cell


def test_without_a_project_nothing_is_logged(runs):
    assert not (runs["wrong"] / LOG_SUBDIR).exists()


def test_offline_mode_is_said_up_front(runs):
    stderr = (runs["oracle"].parent / "oracle.stderr").read_text()
    first = stderr.splitlines()[0]
    assert first.startswith("piexp: W&B is offline (WANDB_MODE=offline)"), stderr[:2000]
    assert "wandb sync RUN/wandb/offline-run-*" in first


@pytest.mark.parametrize(
    "command",
    [
        ["mode=eval", "policy=oracle", *SMALL, "mode.preflight=false", "mode.wandb_project=piexp-test"],
        ["mode=check", *SMALL, "mode.wandb_project=piexp-test"],
    ],
    ids=["eval", "check"],
)
def test_without_credentials_a_run_is_refused_before_it_starts(tmp_path: Path, command: list[str]) -> None:
    """A project without W&B credentials used to fail after the whole eval had run, with a
    traceback; now it is one paragraph naming the fixes, exit 3, nothing written."""
    work = tmp_path / "work"
    work.mkdir()
    done = _piexp(work, *command, "hydra.run.dir=run", offline=False, home=tmp_path)
    assert done.returncode == 3, done.stderr[-3000:]
    text = " ".join(done.stderr.split())
    assert text.startswith("piexp: mode.wandb_project=piexp-test logs to Weights & Biases, which has no credentials")
    assert "wandb login" in text and "WANDB_MODE=offline" in text and "Traceback" not in text
    assert list(work.iterdir()) == []


def test_compare_without_credentials_is_refused_before_it_writes(runs, tmp_path: Path) -> None:
    done = _piexp(tmp_path, "compare", str(runs["wrong"]), str(runs["oracle"]), "--out", str(tmp_path / "cmp"),
                  "--wandb-project", "piexp-test", offline=False, home=tmp_path)  # fmt: skip
    assert done.returncode == 3, done.stderr[-3000:]
    assert "--wandb-project piexp-test logs to Weights & Biases" in " ".join(done.stderr.split())
    assert not (tmp_path / "cmp").exists()
