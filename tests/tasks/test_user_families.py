"""Families and task files that live outside piexp. A family written in a
temporary folder (on PYTHONPATH, selected with --config-dir), one declared by an installed
distribution's `piexp.families` entry point, and a JSON Lines task file each pass
mode=check and the oracle's evaluation through the real CLI, sandbox and run folder;
`reproduce` refuses a rerun once their code or file changed; every bad input is refused
with one paragraph naming the file, exit 2 and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from piexp.errors import UserError
from tests.job_launcher import run_piexp as launch

SMALL = ["tasks.train_per_family=2", "tasks.eval_per_family=2", "mode.oracle_tasks_per_cell=1"]

GENERATOR = """
from __future__ import annotations

import random
from dataclasses import dataclass

from piexp.tasks import Family


@dataclass(frozen=True)
class Params:
    n_numbers: int = 12  # lines in numbers.txt
    max_value: int = 500  # numbers are drawn from 1..max_value


def generate(rng: random.Random, p: Params):
    numbers = [rng.randint(1, p.max_value) for _ in range(p.n_numbers)]
    answer = {answer}
    instruction = "Print the sum of the even numbers in `numbers.txt` (one integer a line)."
    return instruction, {{"numbers.txt": "\\n".join(map(str, numbers)) + "\\n"}}, answer, {{}}


FAMILY = Family(
    name="{name}",
    summary="sum of the even numbers",
    params_type=Params,
    limits={limits},
    generate=generate,
)
"""

REFERENCES = {
    "py": 'print(sum(int(l) for l in open("numbers.txt") if l.strip() and int(l) % 2 == 0))\n',
    "js": 'const fs = require("fs");\nlet t = 0;\nfor (const l of fs.readFileSync("numbers.txt", "utf8").split("\\n"))'
    " { if (l.trim() && parseInt(l, 10) % 2 === 0) t += parseInt(l, 10); }\nconsole.log(t);\n",
}


def write_family(
    root: Path,
    name: str,
    *,
    answer: str = "sum(n for n in numbers if n % 2 == 0)",
    limits: str = '{"n_numbers": (1, 100), "max_value": (1, 10000)}',
    references: tuple[str, ...] = ("py", "js"),
    target: str | None = None,
    extra_module: str = "",
) -> str:
    """A family package `<name>_pkg_<unique>` under root, its references and its YAML in
    root/conf/family/<name>.yaml; returns the package name (unique: modules are cached)."""
    package = f"{name}_pkg_{uuid.uuid4().hex[:8]}"
    (root / package / "refs").mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    source = GENERATOR.format(name=name, answer=answer, limits=limits) + extra_module
    (root / package / f"{name}.py").write_text(source)
    for extension in references:
        (root / package / "refs" / f"{name}.{extension}").write_text(REFERENCES[extension])
    (root / "conf" / "family").mkdir(parents=True, exist_ok=True)
    (root / "conf" / "family" / f"{name}.yaml").write_text(
        f"# @package family\n{name}:\n  _target_: {target or f'{package}.{name}.FAMILY'}\n  n_numbers: 12\n"
    )
    return package


def run_piexp(
    cwd: Path, *args: str, pythonpath: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p)
    return launch(*args, cwd=cwd, env=env, timeout=timeout)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def said(result: subprocess.CompletedProcess) -> str:
    """stderr as one line (a paragraph is wrapped at 100 columns)."""
    return " ".join(result.stderr.split())


def assert_refused(result: subprocess.CompletedProcess, run_dir: Path, *needles: str) -> None:
    """Exit 2, one paragraph (no traceback) naming each needle, and no run folder."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    text = " ".join(result.stderr.split())
    for needle in needles:
        assert needle in text, text
    assert not run_dir.exists(), "a refused run must write nothing"


def test_family_from_a_folder_outside_piexp_checks_evaluates_and_reproduces(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    write_family(root, "evens")
    conf = str(root / "conf")
    run = tmp_path / "check"
    result = run_piexp(
        tmp_path, "--config-dir", conf, "family=evens,arith", "lang=python,javascript", "mode=check", *SMALL,
        f"hydra.run.dir={run}", pythonpath=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = read_json(run / "check.json")
    assert report["passed"] and report["cells"]["evens"]["javascript"]["status"] == "ok"
    manifest = read_json(run / "manifest.json")
    origin = manifest["family_origins"]["evens"]
    assert origin["kind"] == "generator" and origin["file"].startswith(str(root))
    assert set(origin["digest"]) == {"code", "references", "params"}
    assert manifest["family_origins"]["arith"]["target"] == "piexp.tasks.families.arith.FAMILY"
    assert f"file://{root / 'conf'}" in manifest["config_search_path"]

    evaluation = tmp_path / "eval"
    result = run_piexp(
        tmp_path, "--config-dir", conf, "family=evens", "lang=python", "mode=eval", "policy=oracle", *SMALL[:2],
        f"hydra.run.dir={evaluation}", pythonpath=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(evaluation / "results.json")["overall"]["pass@1"] == 1.0

    # reproduce finds the family again from another folder (the search path is recorded)...
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_piexp(elsewhere, "reproduce", str(evaluation), "--check-only", pythonpath=root)
    assert result.returncode == 0, result.stderr
    # ... and refuses it once the family's code changed, naming the family and the file.
    (module,) = root.glob("evens_pkg_*/evens.py")
    module.write_text(module.read_text() + "\n# an edit\n")
    result = run_piexp(elsewhere, "reproduce", str(evaluation), "--check-only", pythonpath=root)
    assert result.returncode == 2 and "Family 'evens' changed since the run" in said(result)
    assert f"its code ({module})" in said(result)


def test_family_of_an_installed_package_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """A small package, built and installed by pip into a site folder, that declares its
    config package in the `piexp.families` entry-point group: no --config-dir needed."""
    project = tmp_path / "project"
    package = write_family(project, "odds_ep")
    (project / "conf").rename(project / package / "conf")
    (project / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "my-tasks-{package[-8:]}"
            version = "1.2.3"
            [project.entry-points."piexp.families"]
            odds = "{package}.conf"
            [tool.setuptools]
            packages = ["{package}"]
            [tool.setuptools.package-data]
            {package} = ["conf/family/*.yaml", "refs/*"]
            """)
    )
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(site), str(project)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    run = tmp_path / "check"
    result = run_piexp(
        tmp_path, "family=odds_ep", "lang=python", "mode=check", *SMALL, f"hydra.run.dir={run}", pythonpath=site
    )
    assert result.returncode == 0, result.stderr[-3000:]
    origin = read_json(run / "manifest.json")["family_origins"]["odds_ep"]
    assert (origin["package"], origin["version"]) == (f"my-tasks-{package[-8:]}", "1.2.3")
    assert origin["file"].startswith(str(site))
    assert f"pkg://{package}.conf" in read_json(run / "manifest.json")["config_search_path"]


def task_line(task_id: object, answer: object, numbers: list[int], **extra: object) -> str:
    entry = {
        "id": task_id,
        "instruction": "Print the sum of the numbers in `numbers.txt`.",
        "files": {"numbers.txt": "".join(f"{n}\n" for n in numbers)},
        "answer": answer,
        "references": {"python": 'print(sum(int(l) for l in open("numbers.txt") if l.strip()))\n'},
        **extra,
    }
    return json.dumps(entry)


def write_task_file(root: Path, name: str, lines: list[str] | bytes) -> Path:
    path = root / f"{name}.jsonl"
    path.write_bytes(lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode())
    (root / "conf" / "family").mkdir(parents=True, exist_ok=True)
    (root / "conf" / "family" / f"{name}.yaml").write_text(
        f"# @package family\n{name}:\n  _target_: piexp.tasks.task_file.TaskFileFamily\n  path: {path}\n"
        "  eval_percent: 30\n"
    )
    return path


def good_task_lines(count: int = 8) -> list[str]:
    lines = [task_line(f"t{i}", sum(range(i, i + 5)), list(range(i, i + 5))) for i in range(count)]
    lines[0] = task_line("t0", 10, [0, 1, 2, 3, 4], split="eval")  # an explicit split is kept
    return lines


def test_task_file_checks_evaluates_and_reproduction_refuses_an_edited_file(tmp_path: Path) -> None:
    path = write_task_file(tmp_path, "sums", good_task_lines())
    conf = str(tmp_path / "conf")
    run = tmp_path / "check"
    result = run_piexp(tmp_path, "--config-dir", conf, "family=sums", "mode=check", *SMALL, f"hydra.run.dir={run}")
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = read_json(run / "manifest.json")
    origin = manifest["family_origins"]["sums"]
    assert origin["kind"] == "task_file" and origin["path"] == str(path) and len(origin["sha256"]) == 64
    assert len(manifest["task_digests"]["eval"]) >= 1
    evaluation = tmp_path / "eval"
    result = run_piexp(
        tmp_path, "--config-dir", conf, "family=sums", "mode=eval", "policy=oracle", *SMALL[:2],
        f"hydra.run.dir={evaluation}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(evaluation / "results.json")["overall"]["pass@1"] == 1.0
    path.write_text(path.read_text().replace('"t7"', '"t7b"'))
    result = run_piexp(tmp_path, "reproduce", str(evaluation), "--check-only")
    assert result.returncode == 2 and "Family 'sums' changed since the run" in said(result)
    assert f"its task file ({path})" in said(result)


def test_a_task_files_reference_printing_another_number_is_refused_before_anything_runs(tmp_path: Path) -> None:
    lines = good_task_lines(4)
    entry = json.loads(lines[0])  # t0: the eval split's first task
    entry["references"]["python"] = "print(7)\n"
    lines[0] = json.dumps(entry)
    path = write_task_file(tmp_path, "sums_bad", lines)
    run = tmp_path / "check"
    result = run_piexp(
        tmp_path,
        "--config-dir",
        str(tmp_path / "conf"),
        "family=sums_bad",
        "mode=check",
        *SMALL,
        f"hydra.run.dir={run}",
    )
    assert_refused(result, run, f"its python reference ({path}) printed '7'", "on task eval-sums_bad-t0 (eval split)")


@pytest.mark.parametrize(
    ("case", "needles"),
    [
        ("no_import", ["_target_ nowhere_pkg.mod.FAMILY does not import", "PYTHONPATH"]),
        ("not_a_family", ["is a int, not a family", "Family("]),
        ("raises", ["family 'fam' (", "task 0 of the train split", "the generator raised ZeroDivisionError"]),
        ("float_answer", ["the answer 0.5 is a float, not an integer"]),
        ("huge_answer", ["outside +/-2^53"]),
        ("unbounded", ["parameter(s) max_value have no bounds", "limits="]),
        ("nondeterministic", ["is not deterministic", "draw every random choice from the rng"]),
        ("no_js_reference", ["family fam has no reference program in javascript", "it has python"]),
        ("builtin_clash", ["'arith' is defined twice", "conf/family/arith.yaml"]),
        (
            "reference_crashes",
            ["its javascript reference (", "refs/fam.js) crashed (exit 1", "on task train-fam-0-00000"],
        ),
        ("reference_wrong", ["its python reference (", "refs/fam.py) printed '7' as its last line", "whose answer is"]),
    ],
)
def test_bad_family_is_refused_in_one_paragraph_with_nothing_written(
    tmp_path: Path, case: str, needles: list[str]
) -> None:
    root = tmp_path / "mine"
    name, languages = "fam", "lang=python,javascript"
    if case == "no_import":
        write_family(root, name, target="nowhere_pkg.mod.FAMILY")
    elif case == "not_a_family":
        package = write_family(root, name, extra_module="\nNOT_A_FAMILY = 3\n")
        (root / "conf" / "family" / "fam.yaml").write_text(
            f"# @package family\nfam:\n  _target_: {package}.fam.NOT_A_FAMILY\n"
        )
    elif case == "raises":
        write_family(root, name, answer="1 // 0")
    elif case == "float_answer":
        write_family(root, name, answer="0.5")
    elif case == "huge_answer":
        write_family(root, name, answer="2**60")
    elif case == "unbounded":
        write_family(root, name, limits='{"n_numbers": (1, 100)}')
    elif case == "nondeterministic":
        write_family(root, name, answer="random.randint(0, 10**9)")  # the module's random, not rng
    elif case == "no_js_reference":
        write_family(root, name, references=("py",))
    elif case == "reference_crashes":
        package = write_family(root, name)
        (root / package / "refs" / "fam.js").write_text('throw new Error("boom");\n')
    elif case == "reference_wrong":
        package = write_family(root, name)
        (root / package / "refs" / "fam.py").write_text("print(7)\n")
    elif case == "builtin_clash":
        package = write_family(root, name)
        (root / "conf" / "family" / "arith.yaml").write_text(
            f"# @package family\narith:\n  _target_: {package}.fam.FAMILY\n"
        )
        name = "arith"
    run = tmp_path / "run"
    result = run_piexp(
        tmp_path, "--config-dir", str(root / "conf"), f"family={name}", languages, "mode=check", *SMALL,
        f"hydra.run.dir={run}", pythonpath=root,
    )  # fmt: skip
    assert_refused(result, run, *needles)


def test_two_user_families_of_one_name_are_refused_naming_both_files(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    write_family(first, "twin")
    write_family(second, "twin")
    run = tmp_path / "run"
    result = run_piexp(
        tmp_path, "--config-dir", str(first / "conf"), f"hydra.searchpath=['file://{second / 'conf'}']",
        "family=twin", "mode=check", *SMALL, f"hydra.run.dir={run}", pythonpath=first,
    )  # fmt: skip
    assert_refused(result, run, "'twin' is defined twice", str(first / "conf"), str(second / "conf"))


@pytest.mark.parametrize(
    ("lines", "needles"),
    [
        (
            [task_line("a", 10, [1, 2, 3, 4]), '{"id": "b", "instruction": "x", "files": {}}'],
            ["line 2 lacks the field(s) answer"],
        ),
        (
            [task_line("a", 10, [1, 2, 3, 4]), task_line("b", "12", [5, 7])],
            ["line 2 (id b): answer must be a JSON integer"],
        ),
        (
            [task_line("a", 10, [1, 2, 3, 4]), task_line("b", 4.5, [5, 7])],
            ["line 2 (id b): answer must be a JSON integer"],
        ),
        (
            [task_line("a", 10, [1, 2, 3, 4]), task_line("a", 12, [5, 7])],
            ["id a appears on line 1 and again on line 2"],
        ),
        (
            [task_line("a", 10, [1, 2, 3, 4]), task_line("b", 10, [1, 2, 3, 4])],
            ["tasks a and b (line 2) are identical"],
        ),
        ([task_line("a", 10, [1, 2, 3, 4]), "{not json"], ["line 2 is not valid JSON"]),
        (task_line("a", 10, [1, 2, 3, 4]).encode() + b"\n" + b'{"id": "\xff"}\n', ["line 2 is not UTF-8", "UTF-8"]),
        (
            [task_line("a", 1, [1], split="train"), task_line("b", 2, [1], split="eval", instruction="Other.")],
            ["eval task eval-f-b repeats train task train-f-a"],
        ),
        ([task_line("a", 10, [1, 2, 3, 4], split="train")], ["no task of its 1 falls in the eval split"]),
    ],
)
def test_bad_task_file_is_refused_in_one_paragraph_with_nothing_written(
    tmp_path: Path, lines: list[str] | bytes, needles: list[str]
) -> None:
    path = write_task_file(tmp_path, "f", lines)
    run = tmp_path / "run"
    result = run_piexp(
        tmp_path, "--config-dir", str(tmp_path / "conf"), "family=f", "mode=check", *SMALL, f"hydra.run.dir={run}"
    )
    assert_refused(result, run, str(path), *needles)


def test_new_family_skeleton_passes_its_own_test_from_any_folder(tmp_path: Path) -> None:
    result = run_piexp(tmp_path, "new-family", "stride", "--dir", str(tmp_path / "work"))
    assert result.returncode == 0, result.stderr
    commands = [line.strip() for line in result.stdout.splitlines() if line.startswith("  PYTHONPATH=")]
    assert len(commands) == 4 and all(str(tmp_path / "work") in command for command in commands)
    assert "mode=check" in commands[1] and "policy=oracle" in commands[2] and "pytest" in commands[3]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The printed pytest command, run from another folder; it runs mode=check on the skeleton.
    done = subprocess.run(
        ["bash", "-c", commands[3] + " -q -p no:cacheprovider"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    again = run_piexp(tmp_path, "new-family", "stride", "--dir", str(tmp_path / "work"))
    assert again.returncode == 2 and "already exist(s); nothing was written" in said(again)


def test_new_family_from_a_jsonl_file_writes_a_checked_task_file_family(tmp_path: Path) -> None:
    source = tmp_path / "mine.jsonl"
    source.write_text("\n".join(good_task_lines(6)) + "\n")
    result = run_piexp(tmp_path, "new-family", "mine", "--dir", str(tmp_path / "work"), "--from-jsonl", str(source))
    assert result.returncode == 0, result.stderr
    yaml_text = (tmp_path / "work" / "conf" / "family" / "mine.yaml").read_text()
    assert "piexp.tasks.task_file.TaskFileFamily" in yaml_text and str(source) in yaml_text
    check = next(line.strip() for line in result.stdout.splitlines() if "mode=check" in line and "PYTHONPATH" in line)
    done = subprocess.run(
        ["bash", "-c", f"{check} {' '.join(SMALL)} hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    refused = run_piexp(tmp_path, "new-family", "other", "--dir", str(tmp_path / "w2"), "--from-jsonl", str(bad))
    assert refused.returncode == 2 and "bad.jsonl line 1 lacks the field(s) instruction, files, answer" in said(refused)
    assert not (tmp_path / "w2").exists()


def test_task_file_split_is_stable_and_keeps_a_workspace_in_one_split(tmp_path: Path) -> None:
    from piexp.tasks.task_file import load_task_file

    lines = [task_line(f"t{i}", i, [i]) for i in range(60)]
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    loaded = load_task_file("many", str(path), 25)
    evals = [task.params["id"] for task in loaded.tasks if task.split == "eval"]
    assert 5 <= len(evals) <= 25  # about a quarter
    # Another order of the same lines assigns the same splits (by content, not position).
    path.write_text("\n".join(reversed(lines)) + "\n")
    again = load_task_file("many", str(path), 25)
    assert sorted(task.params["id"] for task in again.tasks if task.split == "eval") == sorted(evals)


def test_parquet_file_and_datasets_folder_are_task_files_too(tmp_path: Path) -> None:
    """With pyarrow / datasets installed, the same tasks read from Parquet (files as a map
    column) and from a `save_to_disk` folder (files as a JSON string) equal the JSONL's."""
    pyarrow = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    datasets = pytest.importorskip("datasets")
    from piexp.tasks.task_file import load_task_file

    rows = [json.loads(line) for line in good_task_lines(6)]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    expected = [(task.task_id, task.task_digest) for task in load_task_file("t", str(jsonl), 30).tasks]
    table = pyarrow.Table.from_pylist(
        [{**row, "files": list(row["files"].items()), "references": list(row["references"].items())} for row in rows],
        schema=pyarrow.schema(
            [
                ("id", pyarrow.string()),
                ("instruction", pyarrow.string()),
                ("files", pyarrow.map_(pyarrow.string(), pyarrow.string())),
                ("answer", pyarrow.int64()),
                ("references", pyarrow.map_(pyarrow.string(), pyarrow.string())),
                ("split", pyarrow.string()),
            ]
        ),
    )
    parquet.write_table(table, tmp_path / "t.parquet")
    loaded = load_task_file("t", str(tmp_path / "t.parquet"), 30)
    assert [(task.task_id, task.task_digest) for task in loaded.tasks] == expected
    folder = tmp_path / "t_dataset"
    flat = [{**row, "files": json.dumps(row["files"]), "references": json.dumps(row["references"])} for row in rows]
    datasets.Dataset.from_list(flat).save_to_disk(str(folder))
    assert [(task.task_id, task.task_digest) for task in load_task_file("t", str(folder), 30).tasks] == expected
    # A bad row is named by its number.
    flat[2]["answer"] = "12"
    bad = tmp_path / "bad_dataset"
    datasets.Dataset.from_list([{**row, "answer": str(row["answer"])} for row in flat]).save_to_disk(str(bad))
    with pytest.raises(UserError, match=r"bad_dataset row 1 \(id t0\): answer must be a JSON integer"):
        load_task_file("t", str(bad), 30)


def test_a_generator_returning_three_values_previews_and_checks(tmp_path: Path) -> None:
    """`generate` may return (instruction, files, answer) without the per-task choices:
    the fourth value is optional (a three-value generator was refused as malformed)."""
    root = tmp_path / "mine"
    package = write_family(root, "three")
    module = root / package / "three.py"
    module.write_text(module.read_text().replace(", answer, {}\n", ", answer\n"))
    assert "return instruction, {" in module.read_text() and ", answer, {}" not in module.read_text()
    conf = str(root / "conf")
    preview = run_piexp(tmp_path, "tasks", "--config-dir", conf, "family=three", "n=1", pythonpath=root)
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert "numbers.txt" in preview.stdout and "answer" in preview.stdout.lower()
    run = tmp_path / "check"
    result = run_piexp(
        tmp_path, "--config-dir", conf, "family=three", "lang=python", "mode=check", *SMALL, f"hydra.run.dir={run}",
        pythonpath=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(run / "check.json")["passed"]


@pytest.mark.parametrize(
    ("answer", "needle"),
    [("1 // 0", "the generator raised ZeroDivisionError"), ("0.5", "is a float, not an integer")],
    ids=["raises", "float_answer"],
)
def test_params_help_of_a_broken_generator_fails_saying_generator_error(
    tmp_path: Path, answer: str, needle: str
) -> None:
    """`tasks --params` printed a broken generator's failure as "(not a valid setting: ...)"
    under each example and exited 0, as if the setting were at fault; it is the generator's
    bug, so the command fails (exit 2) naming it."""
    root = tmp_path / "mine"
    write_family(root, "broken", answer=answer)
    result = run_piexp(
        tmp_path, "tasks", "--config-dir", str(root / "conf"), "family=broken", "--params", pythonpath=root
    )
    assert result.returncode == 2, result.stdout + result.stderr
    text = said(result)
    assert text.startswith("piexp: generator error in family 'broken' (") and needle in text, text
    assert "not a valid setting" not in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_reproduce_names_the_reference_or_the_package_module_that_changed(tmp_path: Path) -> None:
    """`reproduce` said only that a family's "references" changed (not whether the Python or
    the JavaScript one), and digested only the file defining the family, so an edit to a
    helper module of the same package went unnoticed. Every module of the user's package
    the family imports, and each reference, has a digest of its own in the manifest."""
    root = tmp_path / "mine"
    package = write_family(root, "helped", extra_module="\nfrom .helpers import OFFSET  # noqa: E402\n")
    helper = root / package / "helpers.py"
    helper.write_text("OFFSET = 0\n")
    (root / package / "unused.py").write_text("NOT_IMPORTED = 1\n")
    run = tmp_path / "eval"
    result = run_piexp(
        tmp_path, "--config-dir", str(root / "conf"), "family=helped", "lang=python,javascript", "mode=eval",
        "policy=oracle", *SMALL[:2], f"hydra.run.dir={run}", pythonpath=root,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    files = read_json(run / "manifest.json")["family_origins"]["helped"]["files"]
    assert set(files) == {
        f"module {package}",
        f"module {package}.helped",
        f"module {package}.helpers",
        "python reference",
        "javascript reference",
    }, files
    assert files[f"module {package}.helpers"]["file"] == str(helper.resolve())

    def reproduce() -> str:
        done = run_piexp(tmp_path, "reproduce", str(run), "--check-only", pythonpath=root)
        assert done.returncode == 2, done.stdout + done.stderr
        return said(done)

    assert run_piexp(tmp_path, "reproduce", str(run), "--check-only", pythonpath=root).returncode == 0
    reference = root / package / "refs" / "helped.js"
    original = reference.read_text()
    reference.write_text(original + "// an edit\n")
    text = reproduce()
    assert f"Family 'helped' changed since the run in {run}: its javascript reference ({reference.resolve()})" in text
    assert "python reference" not in text
    reference.write_text(original)
    helper.write_text("OFFSET = 0  # an edit\n")
    assert f"its code ({helper.resolve()}) has digest" in reproduce()
    helper.write_text("OFFSET = 0\n")
    (root / package / "unused.py").write_text("NOT_IMPORTED = 2\n")  # not imported: not the family's code
    assert run_piexp(tmp_path, "reproduce", str(run), "--check-only", pythonpath=root).returncode == 0


@pytest.mark.parametrize("clash", ["builtin_params", "builtin_name", "two_of_mine"])
def test_a_name_defined_twice_is_refused_even_unselected_with_the_fix_that_fits(tmp_path: Path, clash: str) -> None:
    """A clash was refused only when its family was selected, so a run of another family
    went ahead with a search path on which a name meant two things; and the only advice
    was a rename, wrong for a YAML that gives a built-in other parameters (that takes
    `family.NAME.KEY=` overrides)."""
    root = tmp_path / "mine"
    package = write_family(root, "evens")
    search = ["--config-dir", str(root / "conf")]
    if clash == "builtin_params":
        yaml_file = root / "conf" / "family" / "arith.yaml"
        yaml_file.write_text(
            "# @package family\narith:\n  _target_: piexp.tasks.families.arith.FAMILY\n  n_expressions: 20\n"
        )
        needles = [f"{yaml_file} targets piexp's own arith", f"Delete {yaml_file}", "family.arith.KEY=VALUE"]
    elif clash == "builtin_name":
        yaml_file = root / "conf" / "family" / "arith.yaml"
        yaml_file.write_text(f"# @package family\narith:\n  _target_: {package}.evens.FAMILY\n")
        needles = ["arith is one of piexp's own families: give yours a name of its own", "family.arith.KEY=VALUE"]
    else:
        other = tmp_path / "other"
        write_family(other, "twin")
        write_family(root, "twin")
        search += [f"hydra.searchpath=['file://{other / 'conf'}']"]
        needles = ["'twin' is defined twice", str(other / "conf"), "Rename one"]
    run = tmp_path / "run"
    result = run_piexp(
        tmp_path, *search, "family=evens", "lang=python", "mode=check", *SMALL, f"hydra.run.dir={run}",
        pythonpath=root,
    )  # fmt: skip
    assert_refused(result, run, *needles)
    if clash == "builtin_params":
        assert "Rename" not in said(result) and "name of its own" not in said(result)


def test_a_value_out_of_range_names_the_yaml_file_it_came_from(tmp_path: Path) -> None:
    """A family's YAML with a value outside the family's limits was refused as "n_numbers=500
    is outside [1, 100]", which the command line does not show: it names the file now."""
    root = tmp_path / "mine"
    write_family(root, "ranged")
    yaml_file = root / "conf" / "family" / "ranged.yaml"
    yaml_file.write_text(yaml_file.read_text().replace("n_numbers: 12", "n_numbers: 500"))
    conf = str(root / "conf")
    run = tmp_path / "run"
    result = run_piexp(
        tmp_path, "--config-dir", conf, "family=ranged", "mode=check", f"hydra.run.dir={run}", pythonpath=root
    )
    assert_refused(result, run, f"family 'ranged': n_numbers=500, set in {yaml_file}, is outside [1, 100]")
    preview = run_piexp(tmp_path, "tasks", "--config-dir", conf, "family=ranged", pythonpath=root)
    assert preview.returncode == 2 and f"set in {yaml_file}" in said(preview)
    # Set on the command line, the value is the one the user typed: no file to name.
    fixed = run_piexp(
        tmp_path, "tasks", "--config-dir", conf, "family=ranged", "family.ranged.n_numbers=300", pythonpath=root
    )
    assert fixed.returncode == 2 and "n_numbers=300 is outside [1, 100]" in said(fixed)


def test_a_task_file_without_references_previews_and_a_model_evaluates_it_by_the_hint(tmp_path: Path) -> None:
    """A task file without `references` could not even be previewed, and a model eval of it
    was refused with "drop python from lang/eval_lang", which leaves no language at all.
    The preview plays no reference; the refusal names the setting that lets a model run
    on it, and that command runs: `service=local model=tiny-local`, the offline model
    (about 60 s on two busy cores: the local server starts)."""
    lines = [json.dumps({k: v for k, v in json.loads(line).items() if k != "references"}) for line in good_task_lines()]
    write_task_file(tmp_path, "bare", lines)
    conf = str(tmp_path / "conf")
    preview = run_piexp(tmp_path, "tasks", "--config-dir", conf, "family=bare", "n=1")
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert "numbers.txt" in preview.stdout
    params = run_piexp(tmp_path, "tasks", "--config-dir", conf, "family=bare", "--params")
    assert params.returncode == 0, params.stderr[-3000:]
    command = [
        "--config-dir", conf, "family=bare", "lang=python", "mode=eval", "policy=model", "service=local",
        "model=tiny-local", "tasks.eval_per_family=1", "tasks.train_per_family=1", "limits.max_turns=1",
        "limits.max_generation_tokens=16",
    ]  # fmt: skip
    run = tmp_path / "eval"
    refused = run_piexp(tmp_path, *command, f"hydra.run.dir={run}")
    assert_refused(refused, run, "family bare has no reference program in any language", "add mode.preflight=false")
    assert "drop python" not in said(refused)
    result = run_piexp(tmp_path, *command, "mode.preflight=false", f"hydra.run.dir={run}", timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(run / "results.json")["overall"]["episodes"] == 1


def test_a_task_files_path_is_taken_from_its_yaml_folder(tmp_path: Path) -> None:
    """A relative `path` in a task file's YAML was taken from the folder piexp runs in, so
    the family worked only from one folder; beside its YAML, it is found from any (about
    35 s on two busy cores)."""
    root = tmp_path / "mine"
    root.mkdir()
    write_task_file(root, "beside", good_task_lines())
    yaml_file = root / "conf" / "family" / "beside.yaml"
    (root / "beside.jsonl").rename(root / "conf" / "family" / "beside.jsonl")
    yaml_file.write_text(yaml_file.read_text().replace(f"path: {root / 'beside.jsonl'}", "path: beside.jsonl"))
    assert "path: beside.jsonl\n" in yaml_file.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "check"
    result = run_piexp(
        elsewhere, "--config-dir", str(root / "conf"), "family=beside", "mode=check", *SMALL, f"hydra.run.dir={run}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    origin = read_json(run / "manifest.json")["family_origins"]["beside"]
    assert origin["path"] == str(root / "conf" / "family" / "beside.jsonl")
    assert run_piexp(elsewhere, "reproduce", str(run), "--check-only").returncode == 0


def test_the_packaging_guide_installs_a_generator_and_a_task_file_offline(tmp_path: Path) -> None:
    """docs/families.md's packaging section, followed as written: its layout, its
    pyproject.toml (read from the page) and its offline pip command install a generator
    family with its references and a task file named `pkg://...`; both check from a
    folder that holds neither, with no --config-dir, and the run reproduces."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "families.md").read_text(encoding="utf-8")
    section = page.split("## Packaging your families", 1)[1]
    pyproject = section.split("```toml\n", 1)[1].split("```", 1)[0]
    install = next(line for line in section.splitlines() if "pip install" in line)
    project = tmp_path / "my-piexp-tasks"
    package = project / "my_piexp_tasks"
    for folder in ("refs", "data", "conf/family"):
        (package / folder).mkdir(parents=True)
    (project / "pyproject.toml").write_text(pyproject)
    (package / "__init__.py").write_text("")
    (package / "conf" / "__init__.py").write_text("")
    limits = '{"n_numbers": (1, 100), "max_value": (1, 10000)}'
    answer = "sum(n for n in numbers if n % 2 == 0)"
    (package / "collatz.py").write_text(GENERATOR.format(name="collatz", answer=answer, limits=limits))
    for extension, source in REFERENCES.items():
        (package / "refs" / f"collatz.{extension}").write_text(source)
    (package / "data" / "puzzles.jsonl").write_text("\n".join(good_task_lines()) + "\n")
    (package / "conf" / "family" / "collatz.yaml").write_text(
        "# @package family\ncollatz:\n  _target_: my_piexp_tasks.collatz.FAMILY\n"
    )
    (package / "conf" / "family" / "puzzles.yaml").write_text(
        "# @package family\npuzzles:\n  _target_: piexp.tasks.task_file.TaskFileFamily\n"
        "  path: pkg://my_piexp_tasks/data/puzzles.jsonl\n"
    )
    assert install.split()[:2] == [".venv/bin/python", "-m"] and install.split()[-1] == "./my-piexp-tasks"
    site = tmp_path / "site"  # the page installs into the venv; a test installs into a folder of its own
    installed = subprocess.run(
        [sys.executable, *install.split()[1:-1], "--target", str(site), str(project)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "check"
    result = run_piexp(
        elsewhere, "family=collatz,puzzles", "lang=python", "mode=check", *SMALL, f"hydra.run.dir={run}",
        pythonpath=site,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    origins = read_json(run / "manifest.json")["family_origins"]
    assert (origins["collatz"]["package"], origins["collatz"]["version"]) == ("my-piexp-tasks", "0.1.0")
    assert origins["collatz"]["file"] == str(site / "my_piexp_tasks" / "collatz.py")
    assert origins["puzzles"]["path"] == str(site / "my_piexp_tasks" / "data" / "puzzles.jsonl")
    reproduced = run_piexp(elsewhere, "reproduce", str(run), "--check-only", pythonpath=site)
    assert reproduced.returncode == 0, reproduced.stderr[-3000:]
