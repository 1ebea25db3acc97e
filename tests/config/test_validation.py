"""Every validation error: one clear paragraph naming the problem (and the valid
choices), raised before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from piexp.config.argv import rewrite_list_overrides
from piexp.config.compose import load, validate_command_line, validate_saved
from piexp.run_folder import RunFolder
from piexp.config.differences import config_differences
from piexp.errors import UserError

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SELFHOSTED = ["service=selfhosted", "service.url=http://127.0.0.1:8000"]
REMOTE = ["sandbox=remote", "sandbox.url=http://127.0.0.1:8080/run_code"]

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


# A key of another variant, at a value other than the one the old flat block's YAML gave
# it: the option it would set does not exist for this variant.
NO_EFFECT = [
    (["service=tinker"], "service.tcmalloc", "false", "only used with service=local"),
    (["service=tinker"], "service.start_timeout_s", "10", "only used with service=local"),
    (["service=tinker"], "service.compat_proxy", "false", "only used with service=selfhosted"),
    (["service=tinker"], "service.url", "http://127.0.0.1:8000", "only used with service=selfhosted"),
    (
        ["service=local", "model=tiny-local"],
        "service.connect_timeout_s",
        "3",
        "only used with service=tinker or service=selfhosted",
    ),
    (["service=local", "model=tiny-local"], "service.compat_proxy", "false", "only used with service=selfhosted"),
    (["service=local", "model=tiny-local"], "service.url", "http://x:1", "only used with service=selfhosted"),
    (SELFHOSTED, "service.tcmalloc", "false", "only used with service=local"),
    (SELFHOSTED, "service.start_timeout_s", "5", "only used with service=local"),
    (SELFHOSTED, "service.prefix_cache", "true", "only used with service=local"),
    (REMOTE, "sandbox.launcher", "bwrap", "only used with sandbox=embedded"),
    (REMOTE, "sandbox.allow_unisolated", "true", "only used with sandbox=embedded"),
    (REMOTE, "sandbox.output_cap_bytes", "1024", "only used with sandbox=embedded"),
    (REMOTE, "sandbox.max_restarts", "5", "only used with sandbox=embedded"),
    (REMOTE, "sandbox.restart_window_s", "60", "only used with sandbox=embedded"),
    (REMOTE, "sandbox.health_timeout_s", "5", "only used with sandbox=embedded"),
]


@pytest.mark.parametrize(
    ("choice", "key", "value", "users"), NO_EFFECT, ids=[f"{c[0]} {k}={v}" for c, k, v, _ in NO_EFFECT]
)
def test_a_key_with_no_effect_on_its_variant_is_refused(choice: list[str], key: str, value: str, users: str) -> None:
    """A key the variant does not use (reached with `+`, past Hydra's own refusal of a key
    the composed config lacks) is refused, naming the key and the variant."""
    with pytest.raises(UserError) as caught:
        load(["mode=check", *choice, f"+{key}={value}"])
    message = str(caught.value)
    group = key.split(".")[0]
    variant = next(c for c in choice if c.startswith(f"{group}="))
    assert f"{key} has no effect with {variant} ({users}): drop it" in message, message
    assert message.startswith("Invalid configuration: ") and "\n" not in message and "Traceback" not in message
    assert caught.value.exit_code == 2


def test_a_key_of_another_variant_at_its_old_default_is_dropped() -> None:
    """The flat blocks' YAML gave every key to every variant: a key at that value is what
    a run folder saved then holds, and reads as if absent."""
    old_keys = ["+service.tcmalloc=true", "+service.prefix_cache=false", "+service.start_timeout_s=300"]
    assert load(["mode=check", *old_keys]) == load(["mode=check"])
    old_sandbox = ["+sandbox.launcher=zygote", "+sandbox.max_restarts=0", "+sandbox.health_timeout_s=30"]
    assert load(["mode=check", *REMOTE, *old_sandbox]) == load(["mode=check", *REMOTE])


@pytest.mark.parametrize("folder", ["check", "learner_local", "learner_local_train"])
def test_a_saved_config_of_the_flat_blocks_still_reads(folder: str) -> None:
    """The golden run folders saved every service and sandbox key: they validate, and
    recompose to the same config (`piexp reproduce` finds no difference)."""
    run_dir = GOLDEN / folder
    saved = validate_saved(RunFolder(run_dir).config(), run_dir)
    now = load(RunFolder(run_dir).overrides())
    assert type(saved.service) is type(now.service) and type(saved.sandbox) is type(now.sandbox)
    differences = config_differences(saved.model_dump(mode="json"), now.model_dump(mode="json"))
    assert not [line for line in differences if line.startswith(("service.", "sandbox."))], differences


@pytest.mark.parametrize(
    "choice",
    [["service=tinker"], ["service=local", "model=tiny-local"], SELFHOSTED, ["sandbox=embedded"], REMOTE],
    ids=lambda choice: choice[0],
)
def test_each_service_and_sandbox_composes_to_its_own_keys(choice: list[str]) -> None:
    config = load(["mode=check", *choice])
    group, name = choice[0].split("=")
    block = getattr(config, group)
    assert getattr(block, type(block).TAG) == name
    composed = set(load(["mode=check", *choice]).model_dump()[group])
    assert composed == set(type(block).model_fields)
