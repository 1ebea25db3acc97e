"""Every option of every config group and every preset composes into a valid RunConfig;
list-valued overrides keep their two meanings (list in a run, sweep with -m)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from piexp.config.argv import rewrite_list_overrides
from piexp.config.compose import compose, group_options, load, sweep_combinations
from piexp.config.hydra_compose import composing_once
from piexp.config.presets import preset_names
from piexp.config.schema import RunConfig
from piexp.errors import UserError
from piexp.tasks import FAMILIES

# Family config files that select other families rather than being one.
ALIASES = {"all", "graph"}
GROUPS = ["family", "languages", "reward", "limits", "model", "service", "sandbox", "mode"]
REMOTE = ["sandbox.url=http://127.0.0.1:8080/run_code"]


# Options that need a companion override to be valid on their own.
COMPANIONS = {
    ("sandbox", "remote"): REMOTE,
    ("model", "tiny-local"): ["service=local"],  # a local model folder
    ("model", "learner-local"): ["service=local"],  # a local model folder piexp builds
    ("model", "learner-local-pi"): ["service=local"],  # its sibling, pre-trained in both harnesses
    ("service", "selfhosted"): ["service.url=http://127.0.0.1:8000"],
}


# Mode options that are a preset's variant of another mode.
MODE_NAMES = {"train_learn_offline": "train"}


def _extra(group: str, option: str) -> list[str]:
    return COMPANIONS.get((group, option), [])


@pytest.mark.parametrize(
    ("group", "option"),
    [(group, option) for group in GROUPS for option in group_options(group)],
)
def test_every_group_option_composes(group: str, option: str) -> None:
    override = f"{group}=[{option}]" if group == "family" else f"{group}={option}"
    config = load([override, *_extra(group, option)])
    assert isinstance(config, RunConfig)
    if group == "family" and option not in ALIASES:
        assert config.families == [option]
    if group == "mode":
        assert config.mode.name == MODE_NAMES.get(option, option)


def test_family_all_selects_every_family() -> None:
    assert sorted(load(["family=all"]).families) == sorted(FAMILIES)


def test_every_family_has_a_config_file_with_its_params() -> None:
    assert set(group_options("family")) - ALIASES == set(FAMILIES)
    assert load(["family=graph"]).families == ["graph_paths"]


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_composes(preset: str) -> None:
    assert isinstance(load([f"experiment={preset}"]), RunConfig)


def test_required_presets_exist() -> None:
    assert "offline" in preset_names()


def test_comma_list_means_a_list_outside_multirun() -> None:
    argv = rewrite_list_overrides(["family=arith,csv_agg", "lang=python,javascript"])
    assert argv == ["family=[arith,csv_agg]", "lang=[python,javascript]"]
    config = load(argv)
    assert config.families == ["arith", "csv_agg"]
    assert config.train_languages == ["python", "javascript"]
    assert config.eval_languages == ["python", "javascript"]


def test_comma_list_keeps_sweep_meaning_in_multirun() -> None:
    argv = ["-m", "family=arith,csv_agg", "reward.weights.output=0.4,0.6"]
    assert rewrite_list_overrides(argv) == argv
    jobs = list(sweep_combinations(argv[1:]))
    assert len(jobs) == 4
    assert {tuple(load(job).families) for job in jobs} == {("arith",), ("csv_agg",)}
    assert {load(job).reward.weights.output for job in jobs} == {0.4, 0.6}


def test_schedule_keeps_order_and_repeats() -> None:
    config = load(rewrite_list_overrides(["lang=javascript,python,javascript"]))
    assert config.train_languages == ["javascript", "python", "javascript"]
    assert config.eval_languages == ["javascript", "python"]


def test_eval_lang_overrides_eval_languages() -> None:
    config = load(rewrite_list_overrides(["lang=python", "eval_lang=javascript,python"]))
    assert config.eval_languages == ["javascript", "python"]


def test_bracketed_and_quoted_values_are_left_alone() -> None:
    argv = ["family=[arith]", "lang='python'", "seed=3"]
    assert rewrite_list_overrides(argv) == argv


def test_defaults_match_the_reference() -> None:
    config = load([])
    weights = config.reward.weights
    assert (weights.mutation, weights.execution, weights.output, weights.answer) == (0.15, 0.15, 0.6, 0.1)
    assert weights.infrastructure_error == -0.1
    assert (config.reward.stdout_chars, config.reward.stderr_chars) == (512, 1200)
    assert {name: spec.filename for name, spec in config.languages.items()} == {
        "python": "solution.py",
        "javascript": "solution.js",
        "julia": "solution.jl",
    }
    assert {name: spec.sandbox_language for name, spec in config.languages.items()} == {
        "python": "python",
        "javascript": "nodejs",
        "julia": "julia",
    }
    assert config.languages["python"].runtimes == ["python", "python3"]


def test_guess_policy_has_one_spelling_and_null_is_refused_with_a_hint() -> None:
    """`policy=oracle,null` in a sweep list would silently mean the model policy (YAML
    null), so the policy is `guess`, alone, in lists and in presets;
    `null` is refused wherever it is written, naming the new name."""
    assert load(rewrite_list_overrides(["mode=eval", "policy=guess"])).eval_policy == "guess"
    assert load(["mode=eval"]).eval_policy == "model"
    for argv in (
        ["mode=eval", "policy=null"],
        ["-m", "mode=eval", "policy=oracle,null"],
        ["-m", "policy=[oracle,NULL]"],
    ):
        with pytest.raises(UserError, match="now called `guess`"):
            rewrite_list_overrides(argv)
    with pytest.raises(UserError, match="now called `guess`"):
        load(["mode=eval", "policy='null'"])
    from piexp.config.compose import planned_jobs

    policies = [config.eval_policy for _, config in planned_jobs(["mode=eval", "policy=oracle,guess"], multirun=True)]
    assert policies == ["oracle", "guess"]


def _limits_yaml(conf: Path, max_turns: int) -> None:
    (conf / "limits").mkdir(parents=True, exist_ok=True)
    (conf / "limits" / "mine.yaml").write_text(f"defaults:\n  - default\n  - _self_\nmax_turns: {max_turns}\n")


def test_composing_once_gives_each_caller_its_own_copy_of_what_hydra_composes() -> None:
    """Within one command's checks, composing the same overrides again returns what Hydra
    composed the first time, with and without Hydra's node as asked, and a caller that
    changes its config changes no other caller's."""
    overrides = ["mode=eval", "policy=oracle", "family=arith", "lang=python"]
    fresh, fresh_hydra = compose(overrides), compose(overrides, with_hydra=True)
    with composing_once():
        first = compose(overrides, with_hydra=True)
        first.mode.name = "changed"
        again, again_hydra = compose(overrides), compose(overrides, with_hydra=True)
    # Compared unresolved: resolving Hydra's `${now:...}` folders reads the clock.
    assert _tree(again) == _tree(fresh) and "hydra" not in again
    assert _tree(again_hydra) == _tree(fresh_hydra) and "hydra" in again_hydra


def _tree(cfg: DictConfig) -> object:
    return OmegaConf.to_container(cfg, resolve=False)


def test_a_config_file_edited_between_commands_is_read_again(tmp_path: Path) -> None:
    """The copies live only as long as one command's checks: a user's config file edited
    after them (the next command, or the next test of one process) composes anew. Inside
    them, Hydra composed each override list once."""
    path = f"hydra.searchpath=['file://{tmp_path}']"
    _limits_yaml(tmp_path, 3)
    with composing_once():
        assert compose([path, "limits=mine"]).limits.max_turns == 3
        _limits_yaml(tmp_path, 5)
        assert compose([path, "limits=mine"]).limits.max_turns == 3  # the command's one reading
    assert compose([path, "limits=mine"]).limits.max_turns == 5
    with composing_once():
        assert compose([path, "limits=mine"]).limits.max_turns == 5


def test_checking_a_run_composes_its_overrides_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's checks (the sweep a preset declares, the job's config, the folder it
    will write) compose its overrides with Hydra once, not once per check: each compose
    is about 0.2 s of every command's start."""
    import hydra

    from piexp.commands.run import prevalidate

    composed: list[list[str]] = []
    real = hydra.compose

    def counting(config_name: str, overrides: list[str], **kwargs: object) -> DictConfig:
        composed.append(list(overrides))
        return real(config_name, overrides=overrides, **kwargs)

    monkeypatch.setattr(hydra, "compose", counting)
    overrides = ["mode=eval", "policy=oracle", "family=arith", "lang=python", f"hydra.run.dir={tmp_path / 'run'}"]
    prevalidate(overrides, False, False, False)
    mine = [entry for entry in composed if f"hydra.run.dir={tmp_path / 'run'}" in entry]
    assert len(mine) == 1, composed
