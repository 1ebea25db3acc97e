"""Harbor task folders read as a piexp family (piexp.harbor.family, piexp.harbor.task_folder):
piexp's own exports read back with Harbor's digest as each task's digest and their split
and workspace kept; every malformed folder refused as the user's error naming it; every
task piexp's sandbox cannot give what it asks refused with its reason (or left out, named,
under skip_refused); Harbor's own task templates (tests/harbor/fixtures) admitted or
refused with reasons; and the verifier's reward read as Harbor 0.25.0 reads it. None of
this needs Pi: tests/harbor/test_import_pi.py plays the admitted tasks."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from piexp.errors import UserError
from piexp.harbor.digest import task_folder_digest
from piexp.harbor.family import HarborTaskFamily
from piexp.harbor.reward_files import read_reward
from piexp.harbor.task_folder import read_task_folder
from tests.harbor.harbor_rules import HARBOR_PYTHON, NO_HARBOR
from tests.tasks.test_user_families import assert_refused, run_piexp

FIXTURES = Path(__file__).parent / "fixtures"
TASK_TOML = """schema_version = "1.4"

[task]
name = "demo/{name}"

[metadata]
{metadata}
[verifier]
timeout_sec = 60.0
network_mode = "no-network"

[agent]
timeout_sec = 120.0

[environment]
network_mode = "no-network"
{environment}"""


def make_task(root: Path, name: str = "count-lines", *, metadata: str = "", environment: str = "",
              dockerfile: str | None = None, toml: str | None = None) -> Path:  # fmt: skip
    """A small admitted Harbor task: count the lines of data.txt into count.txt; the
    verifier writes reward 1 when count.txt holds 3."""
    folder = root / name
    (folder / "environment" / "data").mkdir(parents=True)
    (folder / "solution").mkdir()
    (folder / "tests").mkdir()
    (folder / "task.toml").write_text(toml or TASK_TOML.format(name=name, metadata=metadata, environment=environment))
    (folder / "instruction.md").write_text("Write the number of lines of /app/data.txt into /app/count.txt.\n")
    (folder / "environment" / "Dockerfile").write_text(
        dockerfile if dockerfile is not None else "FROM ubuntu:24.04\nWORKDIR /app\nCOPY data/ /app/\n"
    )
    (folder / "environment" / "data" / "data.txt").write_text("a\nb\nc\n")
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\nwc -l < data.txt > count.txt\n")
    (folder / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        'if [ "$(cat count.txt 2>/dev/null)" = "3" ]; then echo 1 > /logs/verifier/reward.txt; '
        "else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    return folder


def load(path: Path, **params: object) -> HarborTaskFamily:
    family = HarborTaskFamily("imported")
    family.make_params({"path": str(path), **params})
    return family


def test_an_export_reads_back_with_harbors_digests_its_splits_and_its_workspaces(tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = run_piexp(tmp_path, "export-harbor", "family=arith,dates", "lang=python,javascript",
                       "tasks.train_per_family=1", "tasks.eval_per_family=1", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    pinned = {entry["name"]: entry["digest"] for entry in tomllib.loads((out / "dataset.toml").read_text())["tasks"]}
    family = HarborTaskFamily("imported")
    params = family.make_params({"path": str(out)})
    tasks = [*family.tasks("train", 100, 0, params), *family.tasks("eval", 100, 0, params)]
    assert len(tasks) == len(pinned) == 8
    for task in tasks:
        name = task.verifier.name
        assert "sha256:" + task.task_digest == pinned[name] == task_folder_digest(out / name.split("/")[1])
        exported = tomllib.loads((out / name.split("/")[1] / "task.toml").read_text())["metadata"]
        assert task.split == exported["split"] and task.answer == ""
        workspace = out / name.split("/")[1] / "environment" / "workspace"
        assert dict(task.files) == {p.name: p.read_text() for p in workspace.iterdir()}
        assert task.verifier.workdir == "/app" and task.instruction.startswith("Use ")
    # Pinned by the dataset: a changed folder is refused by name.
    changed = out / next(iter(pinned)).split("/")[1]
    (changed / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    with pytest.raises(UserError, match=f"task {next(iter(pinned))} .* has digest .* pins"):
        load(out)


def test_a_task_folder_admitted_and_its_copy_refused_as_identical(tmp_path: Path) -> None:
    folder = make_task(tmp_path / "one")
    task = read_task_folder(folder)
    assert task.reasons == () and task.files == {"data.txt": "a\nb\nc\n"}
    assert task.verifier.workdir == "/app" and task.verifier.timeout_s == 60.0 and task.verifier.image == "ubuntu:24.04"
    shutil.copytree(folder, tmp_path / "one" / "count-lines-copy")
    with pytest.raises(UserError, match="are identical"):
        load(tmp_path / "one")


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda f: (f / "task.toml").unlink(), "has no task.toml"),
        (lambda f: (f / "instruction.md").unlink(), "has no instruction.md"),
        (lambda f: (f / "task.toml").write_text('schema_version = "9.0"\n'), "schema_version '9.0'"),
        (
            lambda f: (f / "task.toml").write_text('schema_version = "1.4"\n[verifier]\ntimeout = 5\n'),
            "does not know: verifier.timeout",
        ),
        (
            lambda f: (f / "task.toml").write_text('schema_version = "1.4"\nreward_file = "x"\n'),
            "does not know: reward_file",
        ),
        (lambda f: (f / "task.toml").write_text("schema_version = \n"), "is not valid TOML"),
    ],
)
def test_a_malformed_task_folder_is_refused_naming_it(tmp_path: Path, breakage, message: str) -> None:
    folder = make_task(tmp_path)
    breakage(folder)
    with pytest.raises(UserError, match=message) as raised:
        load(tmp_path)
    assert str(folder) in str(raised.value)


REFUSALS = [
    ({"dockerfile": "FROM ubuntu:24.04\nRUN apt-get install -y git\nWORKDIR /app\n"}, "line 2 (RUN apt-get"),
    ({"dockerfile": "FROM nvidia/cuda:12.4\nWORKDIR /app\n"}, "base image nvidia/cuda:12.4 is not one"),
    ({"dockerfile": "FROM ubuntu:24.04\nWORKDIR /tmp/work\n"}, "lies in /tmp"),
    ({"dockerfile": "FROM ubuntu:24.04\n"}, "names no working folder"),
    ({"dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nCOPY data/ /etc/\n"}, "outside the working folder"),
    ({"environment": "gpus = 1\n"}, "asks for a GPU"),
    ({"environment": 'os = "windows"\n'}, "os is 'windows'"),
    ({"environment": 'healthcheck = { command = "true" }\n'}, "a healthcheck"),
    (
        {
            "toml": TASK_TOML.format(name="t", metadata="", environment="").replace(
                '[environment]\nnetwork_mode = "no-network"\n', "[environment]\n"
            )
        },
        "Harbor's default: public",
    ),
    (
        {
            "toml": TASK_TOML.format(name="t", metadata="", environment="").replace(
                'timeout_sec = 60.0\nnetwork_mode = "no-network"', 'timeout_sec = 60.0\nenvironment_mode = "separate"'
            )
        },
        "separate environment",
    ),
    ({"toml": TASK_TOML.format(name="t", metadata="", environment="") + '\n[[steps]]\nname = "one"\n'}, "multi-step"),
    (
        {
            "toml": TASK_TOML.format(name="t", metadata="", environment="").replace(
                "[agent]\n", '[agent]\nuser = "root"\n'
            )
        },
        "runs as user 'root'",
    ),
    ({"environment": 'env = { TOKEN = "${HOST_TOKEN}" }\n'}, "from the host's environment"),
]


@pytest.mark.parametrize(("change", "reason"), REFUSALS)
def test_what_piexps_sandbox_cannot_give_is_refused_with_its_reason(tmp_path: Path, change: dict, reason: str) -> None:
    make_task(tmp_path, "plain")
    refused = make_task(tmp_path, "asks-more", **change)
    with pytest.raises(UserError, match="1 of the 2 tasks") as raised:
        load(tmp_path)
    assert reason in str(raised.value) and "skip_refused=true" in str(raised.value)
    family = HarborTaskFamily("imported")
    params = family.make_params({"path": str(tmp_path), "skip_refused": True})
    kept = [task.verifier.name for split in ("train", "eval") for task in family.tasks(split, 9, 0, params)]
    assert kept == ["demo/plain"]
    refused_names = family.origin()["refused"]
    assert list(refused_names) == ["demo/t" if "toml" in change else f"demo/{refused.name}"]
    assert any(reason in why for why in next(iter(refused_names.values())))


@pytest.mark.parametrize(
    ("remove", "reason"),
    [("solution/solve.sh", "has no solution/solve.sh"), ("tests/test.sh", "has no tests/test.sh")],
)
def test_a_task_without_its_oracle_or_verifier_is_refused(tmp_path: Path, remove: str, reason: str) -> None:
    folder = make_task(tmp_path)
    (folder / remove).unlink()
    assert any(reason in why for why in read_task_folder(folder).reasons)


def test_workspace_files_that_are_not_text_are_refused(tmp_path: Path) -> None:
    folder = make_task(tmp_path)
    (folder / "environment" / "data" / "blob.bin").write_bytes(b"\xff\xfe\x00")
    assert any("blob.bin is not UTF-8" in why for why in read_task_folder(folder).reasons)


def test_harbors_own_templates_are_admitted_or_refused_with_reasons() -> None:
    """Harbor's template task asks for Harbor's default network (public) and has an empty
    instruction; the adapter's template builds an image (RUN apt-get) with the default
    network; the annotator's has no instruction.md (malformed: refused naming it)."""
    template = read_task_folder(FIXTURES / "template-task")
    assert template.verifier is None
    assert any("Harbor's default: public" in why for why in template.reasons)
    assert any("instruction.md is empty" in why for why in template.reasons)
    adapter = read_task_folder(FIXTURES / "adapter-task-template")
    assert adapter.verifier is None
    assert any("RUN apt-get update" in why for why in adapter.reasons)
    with pytest.raises(UserError, match="annotate-task-template has no instruction.md"):
        read_task_folder(FIXTURES / "annotate-task-template")


def test_one_folder_imported_into_train_by_one_family_and_eval_by_another_is_refused(tmp_path: Path) -> None:
    """A task's digest is its folder's, whatever family reads it: the same folder in both
    splits is caught as an overlap before anything runs."""
    make_task(tmp_path / "tasks")
    conf = tmp_path / "conf" / "family"
    conf.mkdir(parents=True)
    for name, percent in (("as_train", 0), ("as_eval", 100)):
        (conf / f"{name}.yaml").write_text(
            f"{name}:\n  _target_: piexp.harbor.family.HarborTaskFamily\n  path: {tmp_path / 'tasks'}\n"
            f"  eval_percent: {percent}\n"
        )
    run = tmp_path / "run"
    result = run_piexp(tmp_path, "--config-dir", str(tmp_path / "conf"), "family=as_train,as_eval", "lang=python",
                       "mode=check", f"hydra.run.dir={run}")  # fmt: skip
    assert_refused(result, run, "overlap")


def test_the_builtin_harness_refuses_harbor_tasks_in_one_paragraph(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", metadata='split = "eval"\n')
    make_task(tmp_path / "tasks", "count-again", metadata='split = "train"\n',
              dockerfile="FROM python:3.12-slim\nWORKDIR /app\nCOPY data/data.txt /app/\n")  # fmt: skip
    conf = tmp_path / "conf" / "family"
    conf.mkdir(parents=True)
    (conf / "imported.yaml").write_text(
        f"imported:\n  _target_: piexp.harbor.family.HarborTaskFamily\n  path: {tmp_path / 'tasks'}\n"
    )
    run = tmp_path / "run"
    result = run_piexp(tmp_path, "--config-dir", str(tmp_path / "conf"), "family=imported", "lang=python",
                       "mode=check", f"hydra.run.dir={run}")  # fmt: skip
    assert_refused(result, run, "family 'imported' holds Harbor tasks", "harness=builtin", "harness=pi")
    run = tmp_path / "two-languages"
    result = run_piexp(tmp_path, "--config-dir", str(tmp_path / "conf"), "family=imported",
                       "lang=python,javascript", "mode=check", f"hydra.run.dir={run}")  # fmt: skip
    assert_refused(result, run, "each would play once per language", "lang=python")


@pytest.mark.parametrize(
    ("files", "reward", "problem"),
    [
        ({"reward.json": b'{"reward": 0.5, "tests": 3}', "reward.txt": b"1"}, 0.5, None),
        ({"reward.json": b'{"score": 0.25}'}, 0.25, None),
        ({"reward.txt": b" 1\n"}, 1.0, None),
        ({"reward.txt": b"0"}, 0.0, None),
        ({"reward.json": b'{"reward": true}'}, 1.0, None),
        ({"rewards.json": b'{"reward": 1}'}, None, "no reward file (it wrote rewards.json"),
        ({}, None, "wrote no reward file"),
        ({"reward.json": b'{"reward": "1"}'}, None, "non-numeric reward"),
        ({"reward.json": b'{"reward": NaN}'}, None, "non-finite reward"),
        ({"reward.json": b"1.0"}, None, "not a JSON object"),
        ({"reward.json": b""}, None, "is empty"),
        ({"reward.json": b'{"a": 1, "b": 0}'}, None, "none named `reward`"),
        ({"reward.txt": b"pass"}, None, "is not a number"),
        ({"reward.txt": b"inf"}, None, "not a finite number"),
    ],
)
def test_the_reward_is_read_as_harbor_reads_it(files: dict, reward: float | None, problem: str | None) -> None:
    read = read_reward(files)
    assert read.reward == reward
    assert (read.problem is None) if problem is None else problem in read.problem


def test_the_task_preview_shows_an_imported_tasks_instruction_and_what_was_left_out(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", metadata='split = "eval"\n')
    shutil.copytree(FIXTURES / "adapter-task-template", tmp_path / "tasks" / "adapter-task-template")
    conf = tmp_path / "conf" / "family"
    conf.mkdir(parents=True)
    (conf / "imported.yaml").write_text(
        f"imported:\n  _target_: piexp.harbor.family.HarborTaskFamily\n  path: {tmp_path / 'tasks'}\n"
        "  skip_refused: true\n"
    )
    result = run_piexp(tmp_path, "tasks", "--config-dir", str(tmp_path / "conf"), "family=imported", "split=eval")
    assert result.returncode == 0, result.stderr
    assert "Write the number of lines of /app/data.txt" in result.stdout and "Use python" not in result.stdout
    assert f"graded by {tmp_path / 'tasks' / 'count-lines'}/tests/test.sh, the workspace at /app" in result.stdout
    assert "left out of family imported: TODO_ORG/{{ADAPTER_ID}}__{task_id}: " in result.stdout
    assert "RUN apt-get update" in result.stdout


@pytest.mark.skipif(HARBOR_PYTHON is None, reason=NO_HARBOR)
def test_the_hand_written_tasks_here_are_valid_harbor_tasks(tmp_path: Path) -> None:
    """The tasks these tests admit are Harbor's too: its own Task model loads them."""
    import subprocess

    folder = make_task(tmp_path, metadata='split = "eval"\n')
    script = (
        "import sys; from pathlib import Path; from harbor.models.task.task import Task; "
        "t = Task(Path(sys.argv[1])); assert Task.is_valid_dir(Path(sys.argv[1])); "
        "print(t.name, t.config.environment.network_mode.value)"
    )
    done = subprocess.run([HARBOR_PYTHON, "-c", script, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["demo/count-lines", "no-network"]
