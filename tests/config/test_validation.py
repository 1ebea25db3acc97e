"""Every validation error: one clear paragraph naming the problem (and the valid
choices), raised before anything runs."""

from __future__ import annotations

import pytest

from piexp.config.argv import rewrite_list_overrides
from piexp.config.compose import load, validate_command_line
from piexp.errors import UserError

CASES = [
    (["family=nosuch"], ["Unknown family option nosuch", "arith"]),
    (["family=arith,nosuch"], ["nosuch", "arith"]),
    (["lang=python,cobol"], ["unknown language cobol", "valid languages: python, javascript, julia"]),
    (["eval_lang=rust"], ["unknown language rust in eval_lang"]),
    (["limits.max_turns=0"], ["limits.max_turns", "greater than 0"]),
    (["limits.max_tool_calls=-3"], ["limits.max_tool_calls"]),
    (["limits.sandbox_timeout_s=0"], ["limits.sandbox_timeout_s"]),
    (["limits.max_generation_tokens=99999"], ["exceeds limits.max_trajectory_tokens"]),
    (["reward.weights.output=-0.5"], ["reward.weights.output", "greater than or equal to 0"]),
    (["reward.weights.infrastructure_error=0.5"], ["reward.weights.infrastructure_error"]),
    (["reward.mode=fancy"], ["reward.mode"]),
    (["sandbox=remote", "sandbox.url=http://10.0.0.5:8080/run_code"], ["loopback"]),
    (["sandbox=remote", "sandbox.url=http://127.0.0.1.example.com/run_code"], ["loopback"]),
    (["sandbox=remote"], ["sandbox.url"]),
    (["mode=train", "policy=oracle"], ["policy is an eval-only option", "mode=train"]),
    (["mode=train", "k=4"], ["k is an eval-only option"]),
    (["mode=eval", "policy=psychic"], ["unknown policy", "oracle"]),
    (["mode=eval", "policy=oracle", "checkpoint=tinker://x/y"], ["checkpoint is only used with policy=model"]),
    (["mode=eval", "checkpoint=/tmp/weights"], ["tinker://"]),
    (["mode=nosuch"], ["Unknown mode option nosuch", "check, eval, train"]),
    (["model=gpt5"], ["Unknown model option gpt5"]),
    (["experiment=nosuch"], ["Unknown experiment option nosuch", "offline"]),
    (["nosuchkey=1"], ["nosuchkey"]),
    (["mode.group_size=0"], ["mode.group_size"]),
    (["tasks.eval_per_family=0"], ["tasks.eval_per_family"]),
]


@pytest.mark.parametrize(("overrides", "fragments"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_invalid_config_is_one_clear_error(overrides: list[str], fragments: list[str]) -> None:
    with pytest.raises(UserError) as caught:
        load(rewrite_list_overrides(overrides))
    message = str(caught.value)
    assert "Traceback" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert caught.value.exit_code == 2


def test_sweep_jobs_are_each_validated() -> None:
    with pytest.raises(UserError, match="Sweep job .*limits.max_turns=0"):
        validate_command_line(["limits.max_turns=4,0"], multirun=True)


def test_a_sweep_presets_own_values_are_validated() -> None:
    configs = validate_command_line(["experiment=reward_sweep"], multirun=False)
    assert sorted(c.reward.weights.output for c in configs) == [0.4, 0.6, 0.8]
    with pytest.raises(UserError, match="Sweep job .*reward.weights.output=-1"):
        validate_command_line(["experiment=reward_sweep", "reward.weights.output=0.5,-1"], multirun=True)
    with pytest.raises(UserError, match="Sweep job .*limits.max_turns=0"):
        validate_command_line(["experiment=reward_sweep", "limits.max_turns=0"], multirun=False)


def test_a_presets_params_for_a_family_the_run_does_not_select_are_left_out() -> None:
    """`experiment=learn_offline family=json_tree`: the preset also sets csv_agg's params,
    which this run does not use (it was refused as an "unknown task family csv_agg");
    json_tree keeps the preset's params. A name that is no family is still refused."""
    config = load(["experiment=learn_offline", "family=json_tree"])
    assert config.families == ["json_tree"] and list(config.family) == ["json_tree"]
    assert config.family["json_tree"]["n_nodes"] == 8  # the preset's, not conf/family's 60
    with pytest.raises(UserError, match="unknown task family no_such_family"):
        load(["family=json_tree", "+family.no_such_family.n=1"])
