"""The base model a run samples and trains, as its manifest records it, and what refuses
another base model than the recorded one: an evaluation of `checkpoint=<run folder>`
here, and a rerun that would resume a run on other weights (a training run would load
its checkpoint onto them, an evaluation would mix two models' episodes) as a conflict of
the run-folder guard. A LoRA adapter on other weights runs without an error and means
nothing. Local models piexp builds (`learner-local`, `tiny-local`) live in cache
folders named after their content, so their identity is the folder's name in its
models folder (the same on another machine or home), and it is known before a fit
(`learner-local`'s from the content key its sources gave here before, or else from its
scripted episodes, rolled out first)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piexp.run_folder import RunFolder
from piexp.config.schema import RunConfig
from piexp.errors import UserError

if TYPE_CHECKING:
    from piexp.pretrain.build import Rollouts
    from piexp.pretrain.data import Rollout
    from piexp.pretrain.recipe import LearnerRecipe

#: The manifest key that records the base model.
BASE_MODEL_KEY = "base_model"


def base_model_identity(name: str) -> str:
    """A model name as recorded: a local model folder as `<models subfolder>/<folder>`
    (e.g. `learner-local/3a401d72500f3279`), any other name as given."""
    path = Path(name)
    return f"{path.parent.name}/{path.name}" if path.is_absolute() else name


def expected_base_model(config: RunConfig) -> str:
    """The identity of the base model `config` will sample from, without building it."""
    return _model_identity(config.model.name)


# Once per process and name: a local model's identity hashes its recipe and sources
# (0.1 s for learner-local, plus a rollout of its episodes where these sources were not
# rolled out here before), and the run-folder guard asks for every folder of a sweep.
@functools.lru_cache(maxsize=None)
def _model_identity(name: str) -> str:
    from piexp.pretrain.build import LEARNER_RECIPES
    from piexp.service.tiny_model import TINY_LOCAL_NAME, tiny_model_dir

    if name in LEARNER_RECIPES:
        from piexp.launch.sandbox import run_sandbox
        from piexp.pretrain.build import data_config, learner_model_dir

        recipe = LEARNER_RECIPES[name]
        sandbox = data_config(recipe).sandbox
        return base_model_identity(
            str(learner_model_dir(lambda: run_sandbox(sandbox), recipe, learner_rollouts(recipe)))
        )
    if name == TINY_LOCAL_NAME:
        return base_model_identity(str(tiny_model_dir()))
    return base_model_identity(name)


def learner_rollouts(recipe: LearnerRecipe) -> Rollouts:
    """How a piexp-built model's scripted episodes are played in each harness its recipe
    names besides the reference environment: by that harness (`harness=<name>` of the
    recipe's data config), made for the rollout and closed after it; a harness that cannot
    run here is refused as a run would be (Pi not installed: `make setup`)."""

    def rollout_in(name: str) -> Rollout:
        async def rollout(config: RunConfig, sandbox_url: str, tasks: Any, policies: Any, progress: Any) -> Any:
            from piexp.config.compose import load
            from piexp.harness.base import make_harness

            harness = make_harness(load([*recipe.data_overrides, f"harness={name}"]).harness)
            try:
                return await harness.scripted_trajectories(config, sandbox_url, tasks, policies, progress)
            finally:
                await harness.aclose()

        return rollout

    return {name: rollout_in(name) for name in recipe.harnesses if name != "builtin"}


def register_local_model_tokenizer(name: str) -> None:
    """Register the tokenizer of a local model piexp builds (`learner-local` and
    `tiny-local`: a smaller Qwen3 vocabulary) under the model's name, without building
    the model: replay renders a recorded run's turns with it, offline."""
    from piexp.pretrain.build import LEARNER_RECIPES
    from piexp.service.tiny_model import TINY_LOCAL_NAME

    if name in LEARNER_RECIPES:
        from piexp.pretrain.build import register_learner_tokenizer

        register_learner_tokenizer(LEARNER_RECIPES[name])
    elif name == TINY_LOCAL_NAME:
        from piexp.service.tiny_model import tiny_tokenizer_dir
        from piexp.tokenizer import register_offline_tokenizer

        register_offline_tokenizer(TINY_LOCAL_NAME, str(tiny_tokenizer_dir()))


def _recorded_base_model(run_dir: Path) -> str | None:
    manifest = RunFolder(run_dir).manifest()  # None: no run there yet
    recorded = manifest.get(BASE_MODEL_KEY) if manifest is not None else None
    return recorded if isinstance(recorded, str) else None  # None: from before piexp recorded it


def base_model_change(run_dir: Path, config: RunConfig) -> str | None:
    """How the base model of the run `run_dir` holds differs from the one `config` would
    train or sample (None when it is the same, unrecorded, or unused: scripted runs)."""
    if not config.uses_service:
        return None
    recorded = _recorded_base_model(run_dir)
    if recorded is None:
        return None
    expected = expected_base_model(config)
    if recorded == expected:
        return None
    return (
        f"its base model differs (held -> new): {recorded} -> {expected}, so its checkpoints or finished "
        "episodes belong to other weights (a piexp-built model changes when its recipe or the code that "
        "shapes its data changes; resuming needs the piexp version its manifest.json records as git_commit)"
    )


def refuse_checkpoint_of_another_base_model(config: RunConfig) -> None:
    """UserError when `checkpoint=` names a training run folder whose manifest records a
    base model other than the one this evaluation would load its checkpoint onto."""
    if config.checkpoint is None or config.checkpoint.startswith("tinker://"):
        return
    from piexp.checkpoint_source import resolve_checkpoint

    run_dir = resolve_checkpoint(config.checkpoint).run_dir
    if run_dir is None:
        return
    trained_on = _recorded_base_model(run_dir)
    if trained_on is None:
        return
    expected = expected_base_model(config)
    if trained_on != expected:
        raise UserError(
            f"checkpoint={config.checkpoint} was trained on the base model {trained_on}, but this "
            f"evaluation would load it onto {expected} (model={config.model.name}); the adapter would be "
            "evaluated on other weights. A piexp-built model changes when its recipe or the code that "
            "shapes its data changes: evaluate with the piexp version the run used (its manifest.json "
            "records git_commit), or train again."
        )
