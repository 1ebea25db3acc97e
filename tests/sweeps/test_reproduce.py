"""`piexp reproduce DIR`: recomposes a run from its folder, from any working directory
and from an installed (non-editable) piexp, verifies config and task digests, and refuses
with the first mismatching task when the generators changed."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sweep_helpers import SweepRuns, read_json, run_piexp

from piexp.commands.reproduce import verify
from piexp.errors import UserError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def source_run(reward_sweep: SweepRuns, tmp_path: Path) -> Path:
    """A private copy of sweep job 2 (the tests below edit it)."""
    copy = tmp_path / "source"
    shutil.copytree(reward_sweep.sweep_dir / "2", copy)
    return copy


def _config_without_record(run_dir: Path) -> dict:
    config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    config.pop("reproduces", None)
    return config


def test_check_only_from_another_directory(source_run: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_piexp(elsewhere, "reproduce", str(source_run), "--check-only")
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout and "match manifest.json" in result.stdout
    assert list(elsewhere.iterdir()) == [], "--check-only must not run anything"


def test_reproduction_has_identical_config_and_digests(source_run: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_piexp(elsewhere, "reproduce", str(source_run))
    assert result.returncode == 0, result.stderr[-3000:]
    (new_run,) = [p.parent.parent for p in (elsewhere / "outputs").rglob(".hydra/config.yaml")]
    # A sweep job is rerun alone, as a single run (its preset says MULTIRUN).
    assert not (elsewhere / "multirun").exists()
    assert _config_without_record(new_run) == _config_without_record(source_run)
    assert yaml.safe_load((new_run / ".hydra" / "config.yaml").read_text())["reproduces"] == str(source_run)
    assert (
        read_json(new_run / "manifest.json")["task_digests"] == read_json(source_run / "manifest.json")["task_digests"]
    )
    assert read_json(new_run / "reproduces.json")["reproduces"] == str(source_run)
    assert read_json(new_run / "results.json")["overall"] == read_json(source_run / "results.json")["overall"]


def test_edited_manifest_digest_names_the_task(source_run: Path) -> None:
    manifest = read_json(source_run / "manifest.json")
    manifest["task_digests"]["eval"][0] = "0" * 64
    (source_run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"eval task #0 \(eval-arith-0-00000, family arith\)"):
        verify(source_run)


def test_changed_generator_is_detected(source_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generator whose code changed is refused by its family's code digest, naming the
    family; one whose code digest is kept but whose tasks differ, by the first task."""
    from piexp.tasks import BUILTIN_TARGETS, FAMILIES
    from piexp.tasks import registry

    family = FAMILIES["arith"]

    def changed(rng, params):  # noqa: ANN001
        instruction, files, answer, used = family.generate(rng, params)
        return instruction + " (changed)", files, answer, used

    target = BUILTIN_TARGETS["arith"]
    edited = dataclasses.replace(family, generate=changed, references_dir=family.refs_dir)
    monkeypatch.setitem(registry._imported, target, edited)
    with pytest.raises(
        UserError,
        match=r"Family 'arith' changed since the run.*arith\.py\) is gone; its code .*test_reproduce\.py is new",
    ):
        verify(source_run)
    manifest = read_json(source_run / "manifest.json")
    manifest.pop("family_origins")  # a run recorded before family origins were kept
    (source_run / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=r"generators changed.*train task #0 \(train-arith-0-00000"):
        verify(source_run)


def test_changed_config_defaults_are_named(source_run: Path) -> None:
    path = source_run / ".hydra" / "config.yaml"
    path.write_text(path.read_text().replace("max_turns: 10", "max_turns: 7"))
    with pytest.raises(UserError, match=r"limits.max_turns: 7 -> 10"):
        verify(source_run)


def test_an_old_saved_config_spelling_out_sandbox_ids_still_reproduces(source_run: Path) -> None:
    """Runs saved before the sandbox id was derived from the language registry have
    `languages.*.sandbox_language` in their config: still the same run; a value other
    than the registry's is refused, naming the registry."""
    from piexp.languages import LANGUAGES

    path = source_run / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    assert config["languages"] and not any("sandbox_language" in spec for spec in config["languages"].values())
    for name, spec in config["languages"].items():
        spec["sandbox_language"] = LANGUAGES[name].sandbox_id
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    _, _, report = verify(source_run)
    assert report["reproduces"] == str(source_run.resolve())
    config["languages"]["javascript"]["sandbox_language"] = "node"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    with pytest.raises(
        UserError,
        match=r"not valid for this piexp.*javascript\.sandbox_language=node differs "
        r".*\(nodejs\); that id is fixed by the language registry",
    ):
        verify(source_run)


def test_a_run_saved_before_families_named_their_code_still_reproduces(source_run: Path) -> None:
    """Configs saved before families named their code have family entries without `_target_`: they ran the
    built-in of that name, which the recomposed YAML names now."""
    path = source_run / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    assert config["family"]["arith"].pop("_target_") == "piexp.tasks.families.arith.FAMILY"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    manifest = read_json(source_run / "manifest.json")
    manifest.pop("family_origins")
    (source_run / "manifest.json").write_text(json.dumps(manifest))
    _, _, report = verify(source_run)
    assert report["reproduces"] == str(source_run.resolve())


def test_a_check_run_recorded_by_an_older_piexp_reproduces(tmp_path: Path) -> None:
    """tests/golden/check was recorded by an older piexp: its saved `service` and `sandbox`
    blocks are the flat ones, with the keys that a variant does not use at their
    then-default values. `reproduce`
    still verifies it as the same run (config, then every task's digest) and, run
    for real, plays it again into a new folder that records what it reproduces."""
    old = tmp_path / "old"
    shutil.copytree(REPO / "tests" / "golden" / "check", old)
    saved = yaml.safe_load((old / ".hydra" / "config.yaml").read_text())
    assert "compat_proxy" in saved["service"] and saved["service"]["name"] == "tinker"
    _, _, report = verify(old)
    assert report["reproduces"] == str(old.resolve())
    result = run_piexp(tmp_path, "reproduce", str(old), f"hydra.run.dir={tmp_path / 'again'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(tmp_path / "again" / "reproduces.json")["reproduces"] == str(old.resolve())
    assert read_json(tmp_path / "again" / "check.json")["passed"] is True


def test_bad_folder_is_one_paragraph_exit_2(tmp_path: Path) -> None:
    for target in (tmp_path / "missing", tmp_path):
        result = run_piexp(tmp_path, "reproduce", str(target), "--check-only")
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("piexp: ") and "Traceback" not in result.stderr
    result = run_piexp(tmp_path, "reproduce", str(tmp_path), "seed=3")
    assert result.returncode == 2 and "only hydra.* settings" in result.stderr


def _copy_tree(destination: Path) -> None:
    """The checkout as git sees it (tracked and new files, nothing ignored): building
    from a copy keeps build/ and *.egg-info out of the shared working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def test_reproduce_check_from_installed_wheel(source_run: Path, tmp_path: Path) -> None:
    """`pip install .` into a fresh venv (dependencies reached through a .pth file, so
    nothing is downloaded); the installed piexp, run outside the source tree, carries
    conf/ and experiments/ and verifies the run."""
    tree, venv, elsewhere = tmp_path / "tree", tmp_path / "venv", tmp_path / "elsewhere"
    tree.mkdir()
    elsewhere.mkdir()
    _copy_tree(tree)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    deps = Path(
        subprocess.run(
            [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "_piexp_test_deps.pth").write_text(f"{deps}\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            str(tree),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "PYTHONPATH")}
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import piexp.config.paths as p; print(p.__file__); print(p.config_dir()); print(p.experiments_dir())",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    assert all(str(site) in line for line in where), where
    assert where[1].endswith("piexp/_conf") and where[2].endswith("piexp/_experiments")
    result = subprocess.run(
        [str(python), "-m", "piexp", "reproduce", str(source_run), "--check-only"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "verified" in result.stdout
