"""The config search path families are found on: `--config-dir DIR` becomes an
absolute `hydra.searchpath` entry, entry points of installed distributions are added,
and the rewriting is idempotent (a reproduction passes the recorded path back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from piexp.config.compose import group_options, load
from piexp.config.search_path import take_config_dir, user_search_path, with_search_path
from piexp.errors import UserError


def family_yaml(conf: Path, name: str, target: str) -> None:
    (conf / "family").mkdir(parents=True, exist_ok=True)
    (conf / "family" / f"{name}.yaml").write_text(f"# @package family\n{name}:\n  _target_: {target}\n")


def test_config_dir_becomes_an_absolute_search_path_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf").mkdir()
    monkeypatch.chdir(tmp_path)
    argv = take_config_dir(["--config-dir", "conf", "family=arith"])
    assert argv[0] == "family=arith"
    assert user_search_path(argv) == [f"file://{tmp_path / 'conf'}"]
    assert with_search_path(argv) == argv  # idempotent
    assert user_search_path(take_config_dir(["--config-dir=conf"])) == [f"file://{tmp_path / 'conf'}"]
    with pytest.raises(UserError, match="is not a folder"):
        take_config_dir(["--config-dir", "missing"])


def test_a_family_yaml_on_the_search_path_is_an_option_and_its_target_is_checked(tmp_path: Path) -> None:
    family_yaml(tmp_path, "elsewhere", "piexp.tasks.families.arith.FAMILY")
    path = f"hydra.searchpath=['file://{tmp_path}']"
    assert "elsewhere" in group_options("family", [path])
    # Its _target_ names the family `arith`, not `elsewhere`: refused, naming both.
    with pytest.raises(UserError, match="is the family 'arith', but its YAML entry calls it 'elsewhere'"):
        load([path, "family=elsewhere"])


def test_a_built_in_name_with_other_code_is_refused_naming_both_origins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UserError, match=r"_target_ piexp.tasks.families.dates.FAMILY is the family 'dates'"):
        load(["family=arith", "family.arith._target_=piexp.tasks.families.dates.FAMILY"])
    # A family of the user's own that calls itself `arith`.
    (tmp_path / "arith_twin_27.py").write_text(
        "import dataclasses\nfrom piexp.tasks.families import arith\n"
        "FAMILY = dataclasses.replace(arith.FAMILY, generate=lambda rng, p: arith.generate(rng, p))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError) as refused:
        load(["family=arith", "family.arith._target_=arith_twin_27.FAMILY"])
    text = str(refused.value)
    assert "family name 'arith' is taken twice: by piexp's built-in piexp.tasks.families.arith.FAMILY" in text
    assert f"and by arith_twin_27.FAMILY ({tmp_path / 'arith_twin_27.py'}" in text


def test_an_entry_point_package_joins_the_search_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "ep_conf_pkg_27"
    family_yaml(package, "ep_alias", "piexp.tasks.families.arith.FAMILY")
    dist = tmp_path / "ep_tasks-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-tasks\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[piexp.families]\nmine = ep_conf_pkg_27\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert with_search_path(["family=arith"])[-1] == "hydra.searchpath=['pkg://ep_conf_pkg_27']"
    assert "ep_alias" in group_options("family", with_search_path([]))
