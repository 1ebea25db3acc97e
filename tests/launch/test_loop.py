"""The researcher's loop in one command (`mode.eval_before`, `mode.eval_after`): the
config each evaluation runs with, and `k` in mode=train only for those evaluations.
End to end on a local server: tests/service/test_local_loop.py."""

from __future__ import annotations

import pytest

from piexp.config.compose import load
from piexp.errors import UserError
from piexp.launch.loop import eval_stage_config


def test_loop_evaluations_use_the_runs_tasks_and_k_without_training_options() -> None:
    config = load(["mode.eval_before=true", "k=3", "tasks.eval_per_family=5", "warm_start.sft_steps=2",
                   "algo=grpo", "eval_lang=[python,javascript]"])  # fmt: skip
    evaluation = eval_stage_config(config, None)
    assert (evaluation.mode.name, evaluation.eval_policy, evaluation.samples_per_task) == ("eval", "model", 3)
    assert evaluation.tasks == config.tasks and evaluation.eval_languages == ["python", "javascript"]
    assert evaluation.mode.preflight is False and evaluation.checkpoint is None
    assert evaluation.warm_start.sft_steps == 0 and evaluation.algo.recipe == "default"


@pytest.mark.parametrize(
    "control",
    [
        ["tasks.pools.enabled=true"],
        ["tasks.adaptive.enabled=true", "family=[arith,dates]"],
        ["tasks.family_weights={arith: 2}", "family=[arith,dates]"],
    ],
)
def test_a_loop_evaluation_of_a_run_with_a_training_control_leaves_the_control_out(control: list[str]) -> None:
    """The control chooses training batches; the evaluations run the eval split as it is
    (the trained evaluation was refused, after training, as an eval given tasks.pools)."""
    config = load(["mode.eval_before=true", "mode.eval_after=true", *control])
    evaluation = eval_stage_config(config, None)
    assert not evaluation.tasks.pools.enabled and not evaluation.tasks.adaptive.enabled
    assert evaluation.tasks.family_weights is None
    assert evaluation.tasks.eval_per_family == config.tasks.eval_per_family
    assert evaluation.tasks.pools.weights == config.tasks.pools.weights  # the rest as the run set it


def test_k_in_train_mode_needs_a_loop_evaluation() -> None:
    with pytest.raises(UserError, match="k also sets the samples of mode.eval_before/eval_after"):
        load(["k=2"])
    assert load(["k=2", "mode.eval_after=true"]).samples_per_task == 2
