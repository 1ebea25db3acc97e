"""Properties every generated task must have, plus the registry's refusals and config."""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path

import pytest

from piexp.errors import UserError
from piexp.tasks import (
    BUILTIN_TARGETS,
    FAMILIES,
    MAX_SAFE_INTEGER,
    build_tasks,
    get_family,
    reference_solution,
    resolve_params,
)
from piexp.tasks.preview import render_preview

CONF = Path(__file__).resolve().parents[2] / "conf" / "family"
FILE_REF = re.compile(r"`([A-Za-z0-9_.-]+\.[a-z]+)`")


@pytest.fixture(scope="module")
def many_tasks():
    tasks = []
    for seed in range(4):
        tasks += build_tasks("train", 6, seed, list(FAMILIES))
        tasks += build_tasks("eval", 6, seed, list(FAMILIES))
    return tasks


def test_instruction_names_exactly_the_files(many_tasks) -> None:
    for task in many_tasks:
        named = set(FILE_REF.findall(task.instruction))
        assert named, task.task_id
        assert named <= set(task.files), f"{task.task_id} names missing files {named - set(task.files)}"
        assert set(task.files) <= named, f"{task.task_id} never mentions {set(task.files) - named}"


def test_answers_are_exact_in_every_language(many_tasks) -> None:
    for task in many_tasks:
        assert -MAX_SAFE_INTEGER < int(task.answer) < MAX_SAFE_INTEGER, task.task_id
        assert str(int(task.answer)) == task.answer


def test_workspaces_fit_a_prompt(many_tasks) -> None:
    for task in many_tasks:
        size = sum(len(content.encode()) for content in task.files.values())
        assert size < 8192, f"{task.task_id}: {size} bytes"
        for content in task.files.values():
            content.encode("ascii")  # plain ASCII: no encoding surprises across runtimes


def test_answers_vary(many_tasks) -> None:
    """A family whose answers barely vary (e.g. always 0) is not testing anything."""
    for family in FAMILIES:
        answers = [t.answer for t in many_tasks if t.family == family]
        assert len(set(answers)) >= len(answers) // 2, (family, answers)


def test_tasks_are_immutable_hashable_and_picklable(many_tasks) -> None:
    task = many_tasks[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.answer = "0"  # type: ignore[misc]
    with pytest.raises(TypeError):
        task.files["x.txt"] = "1"  # type: ignore[index]
    with pytest.raises(TypeError):
        task.params["x"] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(task)) == task
    assert len({task, pickle.loads(pickle.dumps(task))}) == 1
    import json

    json.dumps(task.to_dict())


def test_unknown_family_is_refused_listing_valid_ones() -> None:
    with pytest.raises(UserError) as info:
        build_tasks("train", 1, 0, ["arith", "nope"])
    assert "nope" in str(info.value)
    for name in FAMILIES:
        assert name in str(info.value)
    with pytest.raises(UserError, match="arith"):
        reference_solution("nope", "python")


def test_families_as_comma_string() -> None:
    tasks = build_tasks("train", 1, 0, "arith, dates")
    assert [t.family for t in tasks] == ["arith", "dates"]


def test_unknown_language_and_split_are_refused() -> None:
    with pytest.raises(UserError, match="python, javascript, julia"):
        reference_solution("arith", "cobol")
    with pytest.raises(UserError, match="train, eval"):
        build_tasks("test", 1, 0, ["arith"])


def test_param_overrides_apply_and_bad_ones_are_refused() -> None:
    small = build_tasks("train", 1, 0, ["arith"], params={"arith": {"n_expressions": 12}})[0]
    assert len(small.files["expressions.txt"].splitlines()) == 12
    assert small.params["n_expressions"] == 12
    # Entries for families that are not selected are ignored (cfg.family after family=all).
    build_tasks("train", 1, 0, ["dates"], params={"arith": {"n_expressions": 12}})
    with pytest.raises(UserError, match="n_expressions"):
        build_tasks("train", 1, 0, ["arith"], params={"arith": {"n_exprs": 3}})
    with pytest.raises(UserError, match="outside"):
        build_tasks("train", 1, 0, ["arith"], params={"arith": {"n_expressions": 10**6}})
    with pytest.raises(UserError, match="prime"):
        build_tasks("train", 1, 0, ["arith"], params={"arith": {"modulus": 1000}})
    with pytest.raises(UserError, match="unknown task family"):
        resolve_params(["arith"], {"aritm": {}})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_conf_file_matches_family_params(family: str) -> None:
    import yaml

    path = CONF / f"{family}.yaml"
    text = path.read_text()
    assert text.startswith("# @package family\n")
    data = yaml.safe_load(text)
    assert list(data) == [family]
    defaults = dataclasses.asdict(get_family(family).defaults)
    # The built-ins load through the same `_target_` as any user's family.
    assert data[family].pop("_target_") == BUILTIN_TARGETS[family]
    assert data[family] == defaults, "conf defaults and code defaults disagree"
    body = text.split(f"\n{family}:\n", 1)[1]
    for line in body.splitlines():
        if line.strip():
            assert "#" in line, f"{path.name}: field without a comment: {line!r}"


def test_conf_all_composes_every_family() -> None:
    import shutil
    import tempfile

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with tempfile.TemporaryDirectory() as tmp:
        # Compose only conf/family (other groups belong to other modules' tests).
        shutil.copytree(CONF, Path(tmp) / "family")
        (Path(tmp) / "config.yaml").write_text("defaults:\n  - family: arith\n  - _self_\n")
        with initialize_config_dir(config_dir=tmp, version_base="1.3"):
            cfg = compose(config_name="config", overrides=["family=all"])
    assert list(cfg.family) == list(FAMILIES)
    tasks = build_tasks("eval", 1, 0, list(cfg.family), params=cfg.family)
    assert [t.family for t in tasks] == list(FAMILIES)
    assert OmegaConf.to_container(cfg.family)["arith"] == {
        "_target_": BUILTIN_TARGETS["arith"],
        **dataclasses.asdict(get_family("arith").defaults),
    }


def test_preview_shows_prompt_files_and_answer() -> None:
    tasks = build_tasks("eval", 2, 0, ["log_stats"])
    text = render_preview(tasks, lambda t: f"PROMPT for {t.task_id}", max_file_chars=100)
    for task in tasks:
        assert f"PROMPT for {task.task_id}" in text
        assert f"answer: {task.answer}" in text
        assert task.files["server.log"][:100] in text
        assert task.files["server.log"][:400] not in text  # truncated
    assert "more characters" in text
