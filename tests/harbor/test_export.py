"""`export-harbor` writes Harbor task folders and a digest-pinned dataset.toml: each folder
passes Harbor 0.25.0's task rules (tests/harbor/harbor_rules.py; with HARBOR_PYTHON naming a
Python 3.12 that has the `harbor` package, Harbor's own Task, Packager and DatasetManifest
load them too), the digests are Harbor's and come out the same under another working
folder, umask, locale, time zone and hash seed, and the scripts do what Harbor runs them
for: in a bubblewrap container laid out as Harbor's (workspace at /app, tests at /tests,
logs at /logs), the oracle's solve.sh earns reward 1, doing nothing or a wrong answer 0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.harbor.harbor_rules import (
    HARBOR_PYTHON,
    NO_HARBOR,
    check_dataset,
    check_task_folder,
    harbor_digest,
    parse_rewards,
)
from tests.tasks.test_user_families import assert_refused, run_piexp, said, write_family
from tests.job_launcher import run_piexp as launch

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["tasks.train_per_family=1", "tasks.eval_per_family=1"]


def export(
    cwd: Path, out: Path, *args: str, env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess:
    if env is None:
        return run_piexp(cwd, "export-harbor", *args, "--out", str(out), **kwargs)
    return launch("export-harbor", *args, "--out", str(out), cwd=cwd, env=env, timeout=300)


def run_in_container(task: Path, work: Path, script: str) -> Path:
    """Run /tests/test.sh or /solution/solve.sh as Harbor does, in a bubblewrap container with
    no network: the workspace (copied once from environment/workspace) at /app, the task's
    tests/ and solution/ read-only, /logs writable. Returns the verifier's log folder."""
    app, logs, runtimes = work / "app", work / "logs", work / "bin"
    if not app.exists():
        shutil.copytree(task / "environment" / "workspace", app)
        logs.mkdir()
        runtimes.mkdir()
        (runtimes / "python").symlink_to("/usr/bin/python3")  # the image's `python`
    command = [
        "bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
        "--tmpfs", "/tmp", "--bind", str(app), "/app", "--bind", str(logs), "/logs",
        "--ro-bind", str(task / "tests"), "/tests", "--ro-bind", str(task / "solution"), "/solution",
        "--ro-bind", str(runtimes), "/opt/runtimes", "--setenv", "PATH", "/opt/runtimes:/usr/bin",
        "--chdir", "/app", "--unshare-all", "--die-with-parent", "bash", script,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return logs / "verifier"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "tasks"
    result = export(ROOT, out, "family=arith,dates", "lang=python,javascript", *SMALL)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_every_folder_passes_harbors_task_rules_and_carries_piexps_identity(exported: Path) -> None:
    pins = check_dataset(exported)
    assert len(pins) == 8  # 2 families x 2 splits x 2 languages
    for name, digest in pins.items():
        folder = exported / name.split("/", 1)[1]
        config = check_task_folder(folder)
        metadata = config["metadata"]
        assert {"family", "task_id", "split", "language", "seed", "params", "piexp_task_digest"} <= set(metadata)
        assert metadata["split"] in ("train", "eval") and metadata["seed"] == 0
        assert config["environment"]["network_mode"] == "no-network"
        assert config["verifier"]["network_mode"] == "no-network"
        assert digest == harbor_digest(folder), f"{name}: dataset.toml's digest is not Harbor's"
        instruction = (folder / "instruction.md").read_text()
        assert "How the answer is checked" in instruction and "answer.txt" in instruction
        expected = [
            line for line in (folder / "tests" / "test.sh").read_text().splitlines() if line.startswith("expected=")
        ]
        assert len(expected) == 1 and expected[0].split("'")[1] not in instruction, "the answer is hidden"
    from piexp.tasks import build_tasks

    (task,) = build_tasks("eval", 1, 0, ["arith"])
    config = tomllib.loads((exported / "eval-arith-0-00000-python" / "task.toml").read_text())
    assert config["metadata"]["piexp_task_digest"] == task.task_digest
    assert config["metadata"]["params"]["modulus"] == task.params["modulus"]


def test_digests_are_the_same_under_another_folder_umask_locale_time_zone_and_hash_seed(
    exported: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "TZ": "Asia/Kolkata", "LANG": "C", "LC_ALL": "C", "PYTHONHASHSEED": "12345"}
    env.pop("TINKER_API_KEY", None)
    env["PYTHONPATH"] = str(ROOT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    old = os.umask(0o077)
    try:
        result = export(elsewhere, Path("again"), "family=arith,dates", "lang=python,javascript", *SMALL, env=env)
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (elsewhere / "again" / "dataset.toml").read_bytes() == (exported / "dataset.toml").read_bytes()


@pytest.mark.parametrize("language", ["python", "javascript"])
def test_the_oracle_earns_1_and_nothing_or_a_wrong_answer_earns_0_in_harbors_layout(
    exported: Path, tmp_path: Path, language: str
) -> None:
    task = exported / f"eval-arith-0-00000-{language}"
    logs = run_in_container(task, tmp_path / "nothing", "/tests/test.sh")
    assert parse_rewards(logs) == {
        "reward": 0, "mutation_succeeded": 0, "execution_succeeded": 0, "execution_output_correct": 0,
        "response_answer_correct": 0, "functional_correct": 0,
    }  # fmt: skip
    run_in_container(task, tmp_path / "oracle", "/solution/solve.sh")
    logs = run_in_container(task, tmp_path / "oracle", "/tests/test.sh")
    rewards = parse_rewards(logs)
    assert rewards["reward"] == 1 and all(rewards[k] == 1 for k in rewards), rewards
    # The right program but a wrong stated answer: every step but the last holds.
    (tmp_path / "oracle" / "app" / "answer.txt").write_text("The answer is 12.\n")
    rewards = parse_rewards(run_in_container(task, tmp_path / "oracle", "/tests/test.sh"))
    assert rewards["reward"] == 0 and rewards["execution_output_correct"] == 1
    assert rewards["response_answer_correct"] == 0


def test_a_family_of_the_users_exports_like_a_built_in(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    write_family(root, "evens")
    out = tmp_path / "out"
    result = export(
        tmp_path, out, "--config-dir", str(root / "conf"), "family=evens", "lang=python", "split=eval", *SMALL,
        pythonpath=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    pins = check_dataset(out)
    assert list(pins) == ["piexp/eval-evens-0-00000-python"]
    folder = out / "eval-evens-0-00000-python"
    assert check_task_folder(folder)["metadata"]["family"] == "evens"
    run_in_container(folder, tmp_path / "run", "/solution/solve.sh")
    assert parse_rewards(run_in_container(folder, tmp_path / "run", "/tests/test.sh"))["reward"] == 1


def test_an_export_into_a_folder_that_is_not_empty_is_refused_unless_replace(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    result = export(tmp_path, out, "family=arith", "lang=python", "split=eval", *SMALL)
    assert_refused(result, out / "dataset.toml", "is not empty", "--replace")
    assert (out / "mine.txt").read_text() == "keep me"
    result = export(tmp_path, out, "family=arith", "lang=python", "split=eval", *SMALL, "--replace")
    assert result.returncode == 0, said(result)
    assert sorted(p.name for p in out.iterdir()) == ["dataset.toml", "eval-arith-0-00000-python"]


@pytest.mark.skipif(HARBOR_PYTHON is None, reason=NO_HARBOR)
def test_harbors_own_code_loads_every_exported_task_and_agrees_on_each_digest(exported: Path) -> None:
    result = subprocess.run(
        [str(HARBOR_PYTHON), str(Path(__file__).parent / "harbor_validate.py"), str(exported)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert set(report["tasks"]) == set(check_dataset(exported))
    assert all(task["schema_version"] == "1.4" for task in report["tasks"].values())


@pytest.mark.parametrize(
    "args, needle",
    [
        (["family=arith"], "needs --out DIR"),
        (["family=arith", "--out", "x", "--frobnicate"], "Unknown option --frobnicate"),
        (["family=arith", "--out", "x", "split=test"], "split must be one of train, eval, all"),
        (["family=arith", "--out", "x", "--name", "a/b"], "a Harbor dataset name"),
        (["family=nosuch", "--out", "x"], "nosuch"),
    ],
)
def test_bad_command_lines_are_refused_in_one_paragraph_before_writing(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    result = run_piexp(tmp_path, "export-harbor", *args)
    assert_refused(result, tmp_path / "x", needle)


TASK_FILE_LINE = {
    "id": "p1", "instruction": "Print the sum of the numbers in `data/numbers.txt`.",
    "files": {"data/numbers.txt": "1\n2\n"}, "answer": 3, "split": "eval",
    "references": {"python": "print(sum(int(l) for l in open('data/numbers.txt')))"},
}  # fmt: skip


TRAIN_LINE = {
    "id": "p2", "instruction": "Print the sum of the numbers in `numbers.txt`.", "files": {"numbers.txt": "5\n2\n"},
    "answer": 7, "split": "train", "references": {"python": "print(sum(int(l) for l in open('numbers.txt')))"},
}  # fmt: skip


def _task_file_family(root: Path, line: dict) -> Path:
    """A task-file family `mine`: `line` in the eval split, a task with a reference in train."""
    (root / "conf" / "family").mkdir(parents=True)
    (root / "conf" / "family" / "mine.yaml").write_text(
        "# @package family\nmine:\n  _target_: piexp.tasks.task_file.TaskFileFamily\n  path: tasks.jsonl\n"
    )
    (root / "conf" / "family" / "tasks.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(TRAIN_LINE) + "\n")
    return root / "conf"


def test_a_task_file_exports_its_own_reference_and_nested_files(tmp_path: Path) -> None:
    conf = _task_file_family(tmp_path / "mine", TASK_FILE_LINE)
    out = tmp_path / "out"
    result = export(tmp_path, out, "--config-dir", str(conf), "family=mine", "lang=python", "split=eval")
    assert result.returncode == 0, said(result)
    folder = out / "eval-mine-p1-python"
    assert (folder / "environment" / "workspace" / "data" / "numbers.txt").read_text() == "1\n2\n"
    assert check_dataset(out)["piexp/eval-mine-p1-python"] == harbor_digest(folder)
    run_in_container(folder, tmp_path / "run", "/solution/solve.sh")
    assert parse_rewards(run_in_container(folder, tmp_path / "run", "/tests/test.sh"))["reward"] == 1


def test_a_task_without_a_reference_is_refused_by_name_before_anything_is_written(tmp_path: Path) -> None:
    line = {key: value for key, value in TASK_FILE_LINE.items() if key != "references"}
    conf = _task_file_family(tmp_path / "mine", line)
    out = tmp_path / "out"
    result = export(tmp_path, out, "--config-dir", str(conf), "family=mine", "lang=python", "split=eval")
    assert_refused(result, out, "eval-mine-p1", "no python reference")


def test_params_toml_cannot_hold_go_into_metadata_as_canonical_json(tmp_path: Path) -> None:
    from piexp.config.schema import LanguageSettings
    from piexp.harbor.export import write_task
    from piexp.tasks import Task

    task = Task(
        task_id="eval-demo-0-00000", family="demo", split="eval", answer="3", instruction="Print 3.",
        files={"a.txt": "x\n"}, params={"limit": None, "n": 2},
    )  # fmt: skip
    spec = LanguageSettings(runtimes=["python"], filename="solution.py")
    write_task(tmp_path / "t", task, "python", spec, 0, "print(3)\n")
    metadata = check_task_folder(tmp_path / "t")["metadata"]
    assert "params" not in metadata and json.loads(metadata["params_json"]) == {"limit": None, "n": 2}
