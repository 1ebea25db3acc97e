"""The researcher's loop in one command (`mode=train` with `mode.eval_before` and/or
`mode.eval_after`): evaluate the base model on the eval split into `<run>/eval_base/`,
train in the run folder as an ordinary training run, evaluate the run's final
checkpoint (`checkpoint=<run>`) into `<run>/eval_trained/`, and, when both evaluations
ran, write `compare.md`, `compare.json` and `compare.png` (`piexp compare`'s writer,
piexp.launch.comparison) into the run folder. Each stage is the same code path as running that step on
its own (`mode=eval policy=model [checkpoint=<run>]`), with its own service session:
a local server is stopped before the next stage starts (the trained evaluation's
server runs on the training run's state). The evaluations use `k` (samples per task)
and `tasks.eval_per_family`, `eval_lang` as an ordinary eval does, and no preflight of
their own (training runs it when `mode.preflight` is on). A rerun on the same folder
resumes: a finished stage is skipped, an interrupted evaluation resumes from its
finished episodes, and training from its last checkpoint. `loop.json` records what
each stage did, and which checkpoint the trained evaluation sampled."""

from __future__ import annotations

from piexp.run_folder import RunFolder

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piexp.config.algo import AlgoSettings
from piexp.config.defaults import default_settings
from piexp.config.schema import EvalMode, RunConfig, TrainMode, WarmStartSettings
from piexp.console import say

BASE_EVAL_DIR = RunFolder.BASE_EVAL_DIR
TRAINED_EVAL_DIR = RunFolder.TRAINED_EVAL_DIR
LOOP_RECORD = RunFolder.LOOP_RECORD

RunStage = Callable[[RunConfig, Path], "float | None"]


def eval_stage_config(config: RunConfig, checkpoint: Path | None) -> RunConfig:
    """The `mode=eval policy=model` config of one of the loop's evaluations: the run's
    tasks, languages, model, limits and service; the base model, or `checkpoint`'s final
    one. Training-only settings (warm start, algo, the tasks' training controls) take their
    defaults or are off (an eval refuses others); the eval
    mode is conf/mode/eval.yaml's, without the preflight."""
    data = config.model_dump()
    # What a training batch holds (family weights, pools, adaptive levels) is no eval's.
    data["tasks"] |= {
        "family_weights": None,
        "pools": {**data["tasks"]["pools"], "enabled": False},
        "adaptive": {**data["tasks"]["adaptive"], "enabled": False},
    }
    data.update(
        mode=default_settings("mode", EvalMode, "eval").model_copy(update={"preflight": False}).model_dump(),
        policy="model",
        checkpoint=str(checkpoint) if checkpoint is not None else None,
        warm_start=default_settings("warm_start", WarmStartSettings).model_dump(),
        algo=default_settings("algo", AlgoSettings).model_dump(),
    )
    return RunConfig.model_validate(data)


def _eval_finished(config: RunConfig, eval_dir: Path) -> float | None:
    """pass@1 of a finished eval of `config` in `eval_dir` (every episode recorded, same
    policy, checkpoint and k), else None: the stage then runs, resuming what is there.
    The rest of its settings are the run's own, which the run folder keeps unchanged."""
    results_path = eval_dir / RunFolder.RESULTS
    if not results_path.is_file():
        return None
    results = json.loads(results_path.read_text())
    same = (results.get("policy"), results.get("checkpoint"), results.get("k")) == (
        config.eval_policy,
        config.checkpoint,
        config.samples_per_task,
    )
    complete = not results.get("episodes_failed_to_run") and results["overall"]["episodes"] == results.get(
        "episodes_expected"
    )
    return float(results["overall"]["pass@1"]) if same and complete else None


def _set_aside_stale_trained_eval(run_dir: Path, previous: dict[str, Any], sampler_path: str) -> None:
    """A trained evaluation of an earlier final checkpoint (the run was since trained on
    with a larger mode.max_steps) is moved aside, never deleted, so it is not resumed."""
    eval_dir = run_dir / TRAINED_EVAL_DIR
    evaluated = previous.get("eval_trained", {}).get("sampler_path")
    if eval_dir.exists() and evaluated is not None and evaluated != sampler_path:
        aside = eval_dir.with_name(f"{TRAINED_EVAL_DIR}{RunFolder.REPLACED_MARK}{time.strftime('%Y%m%d-%H%M%S')}")
        eval_dir.rename(aside)
        say(f"loop: {eval_dir} evaluated an earlier checkpoint ({evaluated}); moved to {aside}")


def _end_client_sessions() -> None:
    """Stop the heartbeats of the tinker sessions a finished stage leaves behind.

    The stage's clients are not reachable from here (the cookbook and the model policy
    create them), and their session heartbeats go on every 10 s, warning after 2 min
    once a local stage's server is gone. tinker has no public registry of them, so the
    holders are found among live objects; `close()` only cancels local tasks."""
    import gc

    from tinker.lib.internal_client_holder import InternalClientHolder

    for holder in [obj for obj in gc.get_objects() if isinstance(obj, InternalClientHolder)]:
        holder.close()


def _training_finished(config: RunConfig, run_dir: Path) -> bool:
    """Whether the run saved its final checkpoint at mode.max_steps and wrote its summary."""
    from tinker_cookbook.checkpoint_utils import get_last_checkpoint

    assert isinstance(config.mode, TrainMode)
    last = get_last_checkpoint(str(run_dir))
    return (last is not None and last.name == "final" and (last.batch or 0) >= config.mode.max_steps
            and (run_dir / RunFolder.SUMMARY).is_file())  # fmt: skip


def _run_eval_stage(name: str, config: RunConfig, eval_dir: Path, run_stage: RunStage) -> dict[str, Any]:
    started = time.perf_counter()
    done = _eval_finished(config, eval_dir)
    if done is None:
        say(f"loop: {name} ({eval_dir})")
        run_stage(config, eval_dir)
        _end_client_sessions()
        done = _eval_finished(config, eval_dir)
    else:
        say(f"loop: {name} already finished in {eval_dir}; skipped")
    return {"dir": str(eval_dir), "pass@1": done, "wall_s": round(time.perf_counter() - started, 1)}


def run_loop(config: RunConfig, run_dir: Path, run_stage: RunStage) -> float | None:
    """Run the loop's stages in `run_dir`; returns the trained model's pass@1 when it was
    evaluated. `run_stage(config, folder)` runs one mode in a folder with its service."""
    from piexp.checkpoint_source import resolve_checkpoint
    from piexp.launch.base_model import refuse_checkpoint_of_another_base_model
    from piexp.launch.comparison import write_comparison

    mode = config.mode
    assert isinstance(mode, TrainMode)
    base_config = eval_stage_config(config, None)  # validated before any stage runs
    record_path = run_dir / LOOP_RECORD
    previous = json.loads(record_path.read_text(encoding="utf-8")) if record_path.is_file() else {}
    record: dict[str, Any] = {}

    def write_record() -> None:  # after every stage: what a resume finds
        record_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    if mode.eval_before:
        record["eval_base"] = _run_eval_stage("eval_base", base_config, run_dir / BASE_EVAL_DIR, run_stage)
        write_record()
    started = time.perf_counter()
    if _training_finished(config, run_dir):
        say(f"loop: training already finished in {run_dir}; skipped")
    else:
        say(f"loop: train ({run_dir})")
        run_stage(config, run_dir)
        _end_client_sessions()
    record["train"] = {"dir": str(run_dir), "wall_s": round(time.perf_counter() - started, 1)}
    write_record()
    result = None
    if mode.eval_after:
        source = resolve_checkpoint(str(run_dir))
        _set_aside_stale_trained_eval(run_dir, previous, source.sampler_path)
        record["eval_trained"] = {"sampler_path": source.sampler_path, "state_path": source.state_path}
        write_record()  # the checkpoint under evaluation, before its first episode
        trained_config = eval_stage_config(config, run_dir)
        # The job checked its own config; this stage's checkpoint is the run itself, which
        # a resume may find trained on a base model rebuilt since.
        refuse_checkpoint_of_another_base_model(trained_config)
        record["eval_trained"].update(
            _run_eval_stage("eval_trained", trained_config, run_dir / TRAINED_EVAL_DIR, run_stage)
        )
        result = record["eval_trained"]["pass@1"]
    if mode.eval_before and mode.eval_after:
        say(write_comparison([run_dir / BASE_EVAL_DIR, run_dir / TRAINED_EVAL_DIR], run_dir))
        record["comparison"] = str(run_dir / RunFolder.COMPARE_MD)
    write_record()
    return result
