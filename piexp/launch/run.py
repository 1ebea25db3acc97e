"""Run one job in its run folder: splits (overlap refused), manifest, sandbox, then the
selected mode. Train and model evaluation first make sure the service can be reached; a
train run with `mode.eval_before`/`eval_after` runs the loop of `piexp.launch.loop`."""

from __future__ import annotations

from pathlib import Path

from piexp.config.schema import RunConfig, TrainMode
from piexp.config.search_path import running_search_path
from piexp.env.splits import build_splits
from piexp.harness.base import harness_manifest
from piexp.launch.base_model import BASE_MODEL_KEY, base_model_identity, register_local_model_tokenizer
from piexp.launch.manifest import build_manifest, write_manifest
from piexp.launch.sandbox import run_sandbox
from piexp.service import open_service


def run_mode(config: RunConfig, run_dir: Path) -> float | None:
    # Imported here, not at the top: it loads tinker-cookbook (about 1.5 s), which the
    # command line's validation before any job does not need.
    from piexp.cookbook_compat import check_installed_cookbook

    # Every mode runs cookbook episodes: refuse a cookbook piexp's hooks do not fit
    # before the service or the sandbox starts (training's own hooks where it trains).
    mode = config.mode
    check_installed_cookbook(training=isinstance(mode, TrainMode))
    if isinstance(mode, TrainMode) and (mode.eval_before or mode.eval_after):
        from piexp.launch.loop import run_loop

        return run_loop(config, run_dir, run_one_mode)  # evaluations around training, each a run_one_mode
    return run_one_mode(config, run_dir)


def run_one_mode(config: RunConfig, run_dir: Path) -> float | None:
    """The selected mode in `run_dir`, inside its service session when it needs one."""
    config = resolve_local_model(config)
    if config.uses_service:
        # Tinker: preflight; local: start (and at exit stop) a SkyRL server; selfhosted:
        # preflight + compatibility proxy. Yields the config with URL and model resolved.
        with open_service(config, run_dir) as resolved:
            return _run_mode(resolved, run_dir)
    return _run_mode(config, run_dir)


def resolve_local_model(config: RunConfig) -> RunConfig:
    """A model piexp builds itself. With a service, `model=learner-local` names its
    folder, built first (once per machine, in its own embedded sandbox) if this machine has
    none. A scripted policy still renders with the model's tokenizer (token limits,
    transcripts): a local model's is registered offline, without building the model."""
    from piexp.pretrain.build import LEARNER_RECIPES

    if not config.uses_service:
        register_local_model_tokenizer(config.model.name)
        return config
    recipe = LEARNER_RECIPES.get(config.model.name)
    if recipe is None:
        return config
    from piexp.launch.base_model import learner_rollouts
    from piexp.pretrain import ensure_learner_model

    path = ensure_learner_model(lambda: run_sandbox(config.sandbox), recipe, learner_rollouts(recipe))
    return config.model_copy(update={"model": config.model.model_copy(update={"name": str(path)})})


def _run_mode(config: RunConfig, run_dir: Path) -> float | None:
    splits = build_splits(config)
    write_manifest(
        run_dir,
        build_manifest(
            seed=config.seed,
            task_digests=splits.digests(),
            overlap_report=splits.overlap_report,
            extra={
                "mode": config.mode.name,
                "families": config.families,
                "train_languages": config.train_languages,
                "eval_languages": config.eval_languages,
                BASE_MODEL_KEY: base_model_identity(config.model.name),
                # Where each family's code came from, with digests `piexp reproduce` checks,
                # and the config search path that found their YAML.
                "family_origins": splits.family_origins,
                "config_search_path": running_search_path(),
                **({"harness": harness} if (harness := harness_manifest(config.harness)) else {}),
            },
        ),
    )
    # Each mode's module is imported only when that mode runs: together they pull in the
    # tinker-cookbook RL stack, matplotlib and the model policies.
    with run_sandbox(config.sandbox) as sandbox_url:
        if config.mode.name == "check":
            from piexp.launch.check import run_check

            return run_check(config, run_dir, sandbox_url, splits)
        if getattr(config.mode, "preflight", False):
            from piexp.launch.check import run_check

            run_check(config, run_dir, sandbox_url, splits)
        if config.mode.name == "eval":
            from piexp.launch.evaluate import run_eval

            return run_eval(config, run_dir, sandbox_url, splits)
        from piexp.launch.train import run_train

        run_train(config, run_dir, sandbox_url)
    return None
