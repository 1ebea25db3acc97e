"""Every option of tinker-cookbook's RL loop is declared: each one composed from the
command line reaches the `rl.train.Config` (or the episodes' RolloutConfig) piexp
builds, the pinned Config has no field that is neither reachable nor on piexp's own
list, the local service refuses what it cannot honour, and the recorded Config is what
`reproduce` checks. Built as the train path builds it; no service is contacted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import chz
import pytest
from tinker_cookbook.rl import train as rl_train
from tinker_cookbook.rl.rollout_strategy import FailFast, MinViableGroup, RetryOnFailure

from piexp.commands.reproduce import verify_rl_record
from piexp.config.compose import load
from piexp.errors import UserError
from piexp.run_folder import RunFolder
from piexp.launch.rl_record import RECORD_NAME, describe, write_rl_record
from piexp.launch.train import PIEXP_SET_FIELDS, cookbook_config

SANDBOX = "http://127.0.0.1:8080/run_code"


def build(tmp_path: Path, *overrides: str) -> Any:
    return cookbook_config(load(list(overrides)), tmp_path, SANDBOX)


# (overrides, rl.train.Config field, the value it must then have); every value differs
# from the field's default, so a dropped mapping fails.
OPTIONS: list[tuple[list[str], str, Any]] = [
    (["model.learning_rate=2e-5"], "learning_rate", 2e-5),
    (["model=qwen3-8b"], "model_name", "Qwen/Qwen3-8B"),
    (["limits.max_generation_tokens=512"], "max_tokens", 512),
    (["model.renderer=qwen3"], "renderer_name", "qwen3"),
    (["model.lora_rank=4"], "lora_rank", 4),
    (["model.temperature=0.7"], "temperature", 0.7),
    (["mode.eval_every=3"], "eval_every", 3),
    (["mode.save_every=0"], "save_every", 0),
    (["mode.max_steps=7"], "max_steps", 7),
    (["mode.wandb_project=proj"], "wandb_project", "proj"),
    (["algo.loss_fn=cispo"], "loss_fn", "cispo"),
    (
        [
            "algo.loss_fn=ppo",
            "algo.loss_fn_config.clip_low_threshold=0.7",
            "algo.loss_fn_config.clip_high_threshold=1.3",
        ],
        "loss_fn_config",
        {"clip_low_threshold": 0.7, "clip_high_threshold": 1.3},
    ),
    (["algo.num_substeps=2"], "num_substeps", 2),
    (["algo.kl_penalty_coef=0.05"], "kl_penalty_coef", 0.05),
    (["algo.kl_discount_factor=0.9"], "kl_discount_factor", 0.9),
    (
        ["algo.kl_penalty_coef=0.05"],
        "kl_reference_config",
        rl_train.KLReferenceConfig(base_model="Qwen/Qwen3-4B-Instruct-2507"),
    ),
    (
        [
            "algo.kl_penalty_coef=0.05",
            "algo.kl_reference_config.base_model=Qwen/Qwen3-8B",
            "algo.kl_reference_config.load_checkpoint_path=tinker://run/weights/000010",
        ],
        "kl_reference_config",
        rl_train.KLReferenceConfig(base_model="Qwen/Qwen3-8B", load_checkpoint_path="tinker://run/weights/000010"),
    ),
    (["algo.compute_post_kl=true"], "compute_post_kl", True),
    (["algo.remove_constant_reward_groups=true"], "remove_constant_reward_groups", True),
    (
        ["algo.rollout_error_tolerance.strategy=fail_fast", "algo.infrastructure_errors=penalize"],
        "rollout_error_tolerance",
        FailFast(),
    ),
    (["algo.infrastructure_errors=mask", "mode.group_size=4"], "rollout_error_tolerance", MinViableGroup(2, 0)),
    (
        [
            "algo.rollout_error_tolerance.strategy=retry",
            "algo.rollout_error_tolerance.max_retries=5",
            "algo.rollout_error_tolerance.per_rollout_timeout=600",
        ],
        "rollout_error_tolerance",
        RetryOnFailure(max_retries=5, per_rollout_timeout=600),
    ),
    (
        ["algo.rollout_error_tolerance.strategy=min_viable_group", "algo.rollout_error_tolerance.min_successful=3"],
        "rollout_error_tolerance",
        MinViableGroup(min_successful=3),
    ),
    (
        [
            "algo.termination.enabled=true",
            "algo.termination.zero_reward_on_limit=true",
            "algo.termination.limit_stop_reasons=[max_turns]",
            "algo.termination.grader_timeout_seconds=30",
            "algo.termination.skip_grading_on_timeout=true",
            "algo.termination.pass_all_messages_to_grader=true",
        ],
        "termination",
        None,
    ),  # checked field by field below
    (
        ["algo.async_config.max_steps_off_policy=2", "mode.groups_per_batch=6"],
        "async_config",
        rl_train.AsyncConfig(max_steps_off_policy=2, groups_per_batch=6),
    ),
    (
        ["algo.stream_minibatch_config.num_minibatches=2", "algo.num_substeps=2"],
        "stream_minibatch_config",
        rl_train.StreamMinibatchConfig(groups_per_batch=8, num_minibatches=2),
    ),
    (["algo.rolling_save_every=5"], "rolling_save_every", 5),
    (["algo.ttl_seconds=null"], "ttl_seconds", None),
    (["algo.rolling_ttl_seconds=600"], "rolling_ttl_seconds", 600),
    (["algo.num_groups_to_log=0"], "num_groups_to_log", 0),
    (["algo.rollout_json_export=false"], "rollout_json_export", False),
    (["algo.enable_trace=true"], "enable_trace", True),
]


@pytest.mark.parametrize(("overrides", "field", "expected"), OPTIONS, ids=[" ".join(o[0]) for o in OPTIONS])
def test_each_option_reaches_the_cookbook_config(
    overrides: list[str], field: str, expected: Any, tmp_path: Path
) -> None:
    default = build(tmp_path)
    cfg = build(tmp_path, *overrides)
    assert getattr(cfg, field) != getattr(default, field)
    if field == "termination":
        policy = cfg.termination
        assert (
            policy.zero_reward_on_limit,
            policy.limit_stop_reasons,
            policy.grader_timeout_seconds,
            policy.skip_grading_on_timeout,
            policy.pass_all_messages_to_grader,
        ) == (True, ("max_turns",), 30.0, True, True)
        assert cfg.effective_termination() is policy
    else:
        assert getattr(cfg, field) == expected


def test_every_field_of_the_pinned_config_is_reachable_or_set_by_piexp() -> None:
    fields = set(chz.chz_fields(rl_train.Config))
    reachable = {field for _, field, _ in OPTIONS}
    # span_chart_every needs plotly (not installed here); its mapping is checked below.
    reachable.add("span_chart_every")
    unexplained = sorted(fields - reachable - set(PIEXP_SET_FIELDS))
    assert not unexplained, (
        f"rl.train.Config fields neither settable from piexp's config nor on PIEXP_SET_FIELDS: {unexplained}"
    )
    assert not set(PIEXP_SET_FIELDS) & reachable
    assert set(PIEXP_SET_FIELDS) <= fields, "PIEXP_SET_FIELDS names a field the pinned Config does not have"


def test_span_chart_every_needs_plotly_or_reaches_the_config(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("plotly") is None:
        with pytest.raises(UserError, match="algo.span_chart_every needs plotly"):
            load(["algo.span_chart_every=5"])
    else:
        assert build(tmp_path, "algo.span_chart_every=5").span_chart_every == 5


def test_defaults_are_the_cookbook_defaults_and_piexps_previous_behaviour(tmp_path: Path) -> None:
    cfg = build(tmp_path)
    # Everything algo owns is at rl.train.Config's own default.
    reference = rl_train.Config(
        learning_rate=1,
        dataset_builder=cfg.dataset_builder,
        model_name=cfg.model_name,
        recipe_name="x",
        max_tokens=1,
        log_path=str(tmp_path),
    )
    for field in (
        "loss_fn",
        "loss_fn_config",
        "num_substeps",
        "kl_penalty_coef",
        "kl_discount_factor",
        "kl_reference_config",
        "compute_post_kl",
        "remove_constant_reward_groups",
        "termination",
        "async_config",
        "stream_minibatch_config",
        "rolling_save_every",
        "ttl_seconds",
        "rolling_ttl_seconds",
        "num_groups_to_log",
        "rollout_json_export",
        "enable_trace",
        "span_chart_every",
    ):
        assert getattr(cfg, field) == getattr(reference, field), field
    # Except the rollout strategy: an episode the sandbox failed is re-rolled
    # (algo.infrastructure_errors=retry), never scored; algo.infrastructure_errors=penalize
    # gives back the cookbook's default.
    group = load([]).mode.group_size  # type: ignore[union-attr]
    assert cfg.rollout_error_tolerance == RetryOnFailure(max_retries=3 * group)
    assert build(tmp_path, "algo.infrastructure_errors=penalize").rollout_error_tolerance is None
    # The episodes' rollout policy is the model's default, as when none was passed.
    from tinker_cookbook.rl.rollout_presets import default_rollout_config_for_model

    assert cfg.dataset_builder.episode_rollout_config() == default_rollout_config_for_model(cfg.model_name)


def test_rollout_limits_and_parse_errors_reach_the_episodes(tmp_path: Path) -> None:
    cfg = build(
        tmp_path,
        "algo=agentic",
        "algo.parse_errors.penalty_per_error=0.05",
        "algo.parse_errors.mask_error_turns=true",
        "limits.rollout_timeout_s=120",
        "limits.sampling_turn_timeout_s=30",
        "limits.max_sampled_tokens=4000",
        "limits.max_turn_tokens=1000",
        "mode.group_size=2",
    )
    train, _ = asyncio.run(cfg.dataset_builder())
    envs = asyncio.run(train.get_batch(0)[0].make_envs())
    assert len(envs) == 2
    env = envs[0]
    limits = env.rollout_limits
    assert (
        limits.rollout_timeout_seconds,
        limits.sampling_turn_timeout_seconds,
        limits.max_sampled_tokens,
        limits.max_turn_tokens,
    ) == (120.0, 30.0, 4000, 1000)
    policy = env.parse_error_policy
    assert (policy.max_consecutive, policy.penalty_per_error, policy.mask_error_turns) == (2, 0.05, True)
    assert env.message_env.tool_execution == "sequential"
    assert env.message_env.termination_policy.grader_timeout_seconds == 900
    # piexp's own episode limits still bound the episode as before.
    assert env.message_env.max_turns == 10 and env.message_env.max_tool_calls == 16
    assert isinstance(cfg.rollout_error_tolerance, MinViableGroup)


def test_presets_compose_and_say_what_they_are(tmp_path: Path) -> None:
    from piexp.config.compose import group_options
    from piexp.config.paths import config_dir

    presets = group_options("algo")
    assert {"default", "ppo", "grpo", "dapo", "agentic"} <= set(presets)
    for preset in presets:
        text = (config_dir() / "algo" / f"{preset}.yaml").read_text(encoding="utf-8")
        assert text.startswith("#"), f"conf/algo/{preset}.yaml does not open with a comment"
        cfg = build(tmp_path, f"algo={preset}")
        assert load([f"algo={preset}"]).algo.recipe == preset
        assert chz.replace(cfg) == cfg
    grpo = build(tmp_path, "algo=grpo")
    assert (grpo.loss_fn, grpo.loss_fn_config, grpo.kl_penalty_coef) == (
        "ppo",
        {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
        0.04,
    )
    dapo = build(tmp_path, "algo=dapo")
    assert dapo.loss_fn_config["clip_high_threshold"] == 1.28 and dapo.remove_constant_reward_groups


BAD = [
    (["algo.kl_penalty_coef=-1"], "algo.kl_penalty_coef"),
    (["algo.kl_discount_factor=1.5"], "algo.kl_discount_factor"),
    (["algo.loss_fn=sft"], "algo.loss_fn"),
    (["algo.loss_fn=ppo", "algo.loss_fn_config.clip_low_threshold=1.5"], "clip_low_threshold"),
    (["algo.loss_fn_config.clip_high_threshold=1.2"], "only used by ppo, cispo and gspo"),
    (["algo.num_substeps=0"], "algo.num_substeps"),
    (["algo.kl_reference_config.base_model=Qwen/Qwen3-8B"], "only used with algo.kl_penalty_coef > 0"),
    (
        ["algo.async_config.max_steps_off_policy=1", "algo.stream_minibatch_config.num_minibatches=2"],
        "exclude each other",
    ),
    (["algo.stream_minibatch_config.num_minibatches=3"], "multiple of algo.num_substeps"),
    (
        ["algo.rollout_error_tolerance.strategy=retry", "algo.rollout_error_tolerance.min_successful=2"],
        "strategy=min_viable_group",
    ),
    (
        ["algo.rollout_error_tolerance.strategy=min_viable_group", "algo.rollout_error_tolerance.min_successful=9"],
        "exceeds mode.group_size",
    ),
    (["algo.parse_errors.retry_message_template=oops"], "{details}"),
    (["algo.termination.limit_stop_reasons=[done]"], "limit_stop_reasons"),
    (["algo.tool_execution=concurrent_safe"], "algo.tool_execution"),
    (["limits.rollout_timeout_s=0"], "limits.rollout_timeout_s"),
    (["algo=nosuch"], "Valid algo options: agentic, dapo, default, grpo, learn_offline, ppo"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_options_are_refused_up_front(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError) as caught:
        load(overrides)
    assert message in str(caught.value)


LOCAL = ["service=local", "model=tiny-local"]
LOCAL_REFUSED = [
    (["algo.loss_fn=dro"], "algo.loss_fn=dro"),
    (["algo.loss_fn=gspo"], "algo.loss_fn=gspo"),
    (["algo.loss_fn=stable_reinforce"], "algo.loss_fn=stable_reinforce"),
    (
        ["algo.kl_penalty_coef=0.1", "algo.kl_reference_config.base_model=Qwen/Qwen3-8B"],
        "algo.kl_reference_config.base_model=Qwen/Qwen3-8B",
    ),
    (
        ["algo.kl_penalty_coef=0.1", "algo.kl_reference_config.load_checkpoint_path=tinker://m/weights/1"],
        "algo.kl_reference_config.load_checkpoint_path",
    ),
    (["algo.ttl_seconds=3600"], "algo.ttl_seconds=3600"),
    (["algo.rolling_ttl_seconds=60"], "algo.rolling_ttl_seconds=60"),
]


@pytest.mark.parametrize(("overrides", "option"), LOCAL_REFUSED, ids=[" ".join(b[0]) for b in LOCAL_REFUSED])
def test_local_service_refuses_what_skyrl_cannot_honour(overrides: list[str], option: str) -> None:
    with pytest.raises(UserError) as caught:
        load(LOCAL + overrides)
    assert option in str(caught.value) and "service=local" in str(caught.value)
    load(overrides)  # the Tinker service is not second-guessed


def test_learn_offline_trains_with_its_kl_recipe_and_evaluates_without_it() -> None:
    # Its training mode selects the recipe, so the preset's one-step eval is not refused
    # for a training option it would ignore, and a named recipe still wins.
    trained = load(["experiment=learn_offline"]).algo
    assert (trained.recipe, trained.kl_penalty_coef) == ("learn_offline", 0.1)
    assert load(["experiment=learn_offline", "mode=eval", "policy=model"]).algo.recipe == "default"
    assert load(["experiment=learn_offline", "algo=ppo"]).algo.recipe == "ppo"


@pytest.mark.parametrize("preset", ["default", "ppo", "grpo", "dapo", "agentic", "learn_offline"])
def test_local_service_accepts_what_skyrl_supports(preset: str) -> None:
    assert load([*LOCAL, f"algo={preset}"]).algo.recipe == preset
    load(
        [
            *LOCAL,
            "algo.loss_fn=cispo",
            "algo.loss_fn_config.clip_high_threshold=1.5",
            "algo.kl_penalty_coef=0.1",
            "algo.kl_reference_config.base_model=tiny-local",
        ]
    )


def test_the_recorded_config_is_checked_by_reproduce(tmp_path: Path) -> None:
    overrides = ["algo=grpo", "limits.rollout_timeout_s=90"]
    config = load(overrides)
    path = write_rl_record(tmp_path, cookbook_config(config, tmp_path, SANDBOX))
    assert path.name == RECORD_NAME
    record = RunFolder(tmp_path).rl_record()
    assert record is not None and record["kl_penalty_coef"] == 0.04
    assert record["dataset_builder"]["episode_rollout_config"]["limits"]["rollout_timeout_seconds"] == 90.0
    assert verify_rl_record(tmp_path, config) == "matches"
    # A run folder elsewhere, with a resolved service URL, still matches: those are run-local.
    moved = cookbook_config(
        config.model_copy(update={"service": config.service.model_copy(update={"base_url": "http://127.0.0.1:1234"})}),
        tmp_path / "elsewhere",
        SANDBOX,
    )
    write_rl_record(tmp_path, moved)
    assert verify_rl_record(tmp_path, config) == "matches"
    # What the run was actually trained with differs from what this piexp would build now.
    with pytest.raises(UserError, match=r"kl_penalty_coef: 0\.04 -> 0\.0"):
        verify_rl_record(tmp_path, load(["algo=ppo", "limits.rollout_timeout_s=90"]))
    with pytest.raises(UserError, match="rollout_timeout_seconds: 90.0 -> None"):
        verify_rl_record(tmp_path, load(["algo=grpo"]))
    assert describe(cookbook_config(config, tmp_path, SANDBOX))["type"] == "tinker_cookbook.rl.train.Config"
    assert verify_rl_record(tmp_path / "no-record", config) == "not recorded"


def test_the_algo_blocks_names_of_cookbook_values_are_the_pinned_cookbooks() -> None:
    """`piexp.config.algo` spells two sets of the cookbook's and tinker's values so that
    choosing a config loads no RL stack: the RL loss functions (tinker's `LossFnType` but
    supervised cross-entropy and custom code) and the stop reasons a trajectory's limits
    cut it off by (tinker-cookbook's `StopReason`). An upgrade that renames or adds one
    fails here instead of leaving the config's bounds behind."""
    import typing

    from tinker.types import LossFnType
    from tinker_cookbook.rl.types import StopReason

    from piexp.config.algo import LIMIT_STOP_REASONS, RL_LOSS_FNS

    assert set(RL_LOSS_FNS) == set(typing.get_args(LossFnType)) - {"cross_entropy", "custom"}
    assert set(LIMIT_STOP_REASONS) <= {reason.value for reason in StopReason}
