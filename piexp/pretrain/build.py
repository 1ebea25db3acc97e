"""Build the `learner-local` model folder once per content digest: compose the recipe's
data config, roll out the scripted mixture on its train tasks in an embedded sandbox, fit
the model, write it with the offline Qwen3 tokenizer and a marker recording the recipe,
the digest, the timings and the held-out fit; concurrent runs wait on a lock instead of
building twice. Older builds are removed once a new one is complete."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from piexp.config.schema import RunConfig
from piexp.console import ProgressReport, say
from piexp.files import exclusive_lock
from piexp.pretrain.recipe import LearnerRecipe, recipe_digest

LEARNER_MODEL_NAME = "learner-local"
RECIPE = LearnerRecipe()
MARKER = "piexp_learner_model.json"
#: Train tasks kept out of the fit, to measure it (held-out NLL and token accuracy).
HELDOUT_TASKS = 12
#: Answer-turn tasks kept out of the fit, to measure the copy of the printed answer.
HELDOUT_ANSWERS = 100


def _models_root(recipe: LearnerRecipe = RECIPE) -> Path:
    """learner-local's builds; a recipe that withholds behaviours (a variant a bench
    builds) keeps its own, so that neither removes the other's as stale."""
    from piexp.tokenizer import piexp_cache_dir

    name = LEARNER_MODEL_NAME if not recipe.substitutes else f"{LEARNER_MODEL_NAME}-variants"
    return piexp_cache_dir() / "models" / name


def data_config(recipe: LearnerRecipe = RECIPE) -> RunConfig:
    from piexp.config.compose import load

    tasks = recipe.tasks_per_family + recipe.copy_tasks_per_family
    return load([*recipe.data_overrides, f"tasks.train_per_family={tasks}"])


def _digest(config: RunConfig, recipe: LearnerRecipe) -> str:
    shaping = {
        "families": config.families,
        "family": config.model_dump(mode="json")["family"],
        "languages": config.train_languages,
        "limits": config.limits.model_dump(mode="json"),
        "reward": config.reward.model_dump(mode="json"),
        "renderer": config.model.renderer,
        "seed": config.seed,
    }
    return recipe_digest(recipe, Path(__file__).resolve().parents[1], shaping)


def learner_model_dir(recipe: LearnerRecipe = RECIPE) -> Path:
    return _models_root(recipe) / _digest(data_config(recipe), recipe)


def read_marker(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def register_learner_tokenizer(recipe: LearnerRecipe = RECIPE) -> Path:
    """Register the recipe's tokenizer (its smaller Qwen3 vocabulary) under the model's
    name with the cookbook, offline, and return its folder: the build renders its
    episodes with it before the model folder exists, and replay reads a recorded
    learner-local run's turns with it without the model."""
    from tinker_cookbook.tokenizer_utils import register_tokenizer

    from piexp.tokenizer import load_offline_qwen3_tokenizer, offline_qwen3_tokenizer_dir

    tokenizer_dir = offline_qwen3_tokenizer_dir(recipe.bpe_tokens)
    register_tokenizer(LEARNER_MODEL_NAME, lambda: load_offline_qwen3_tokenizer(str(tokenizer_dir)))  # type: ignore[arg-type,return-value]
    return tokenizer_dir


def _policy_draw(recipe: LearnerRecipe, families: Sequence[str]) -> list[str]:
    """A policy for each task: within each family, the recipe's policies in exactly its
    shares (largest remainder), in a seeded random order. A draw at random per task left
    a family's oracle share anywhere near a third, and the base model's choice of
    behaviour follows its data."""
    rng = random.Random(recipe.seed)
    indices: dict[str, list[int]] = {}
    for index, family in enumerate(families):
        indices.setdefault(family, []).append(index)
    drawn = [""] * len(families)
    for family in sorted(indices):
        count = len(indices[family])
        quotas = [(name, count * share) for name, share in recipe.policy_shares]
        counts = {name: int(quota) for name, quota in quotas}
        by_remainder = sorted(quotas, key=lambda q: q[1] - int(q[1]), reverse=True)
        for name, _ in by_remainder[: count - sum(counts.values())]:
            counts[name] += 1
        names = [name for name, _ in recipe.policy_shares for _ in range(counts[name])]
        rng.shuffle(names)
        for index, name in zip(indices[family], names, strict=True):
            drawn[index] = name
    return drawn


SandboxOpener = Callable[[], contextlib.AbstractContextManager[str]]


def ensure_learner_model(open_sandbox: SandboxOpener, recipe: LearnerRecipe = RECIPE) -> Path:
    """The model folder for `recipe`, built first if this machine has no build of it;
    `open_sandbox()` yields a /run_code URL for the build's episodes (the caller's
    sandbox settings; opened only when a build is needed)."""
    config = data_config(recipe)
    _check_substitutes(recipe, config)
    target = _models_root(recipe) / _digest(config, recipe)
    if read_marker(target) is not None:
        return target
    with exclusive_lock(target.parent / ".build.lock"):  # another run building the same model: wait for it
        if read_marker(target) is None:
            with open_sandbox() as sandbox_url:
                _build(config, recipe, target, sandbox_url)
    for stale in target.parent.iterdir():
        if stale.is_dir() and stale != target and not stale.name.startswith("."):
            shutil.rmtree(stale, ignore_errors=True)
    return target


def _check_substitutes(recipe: LearnerRecipe, config: RunConfig) -> None:
    from piexp.policies import POLICIES

    for family, policy, substitute in recipe.substitutes:
        if family not in config.families:
            raise ValueError(f"the recipe withholds {policy!r} from {family!r}, which its data has not")
        if {policy, substitute} - set(POLICIES):
            raise ValueError(f"the recipe substitutes {substitute!r} for {policy!r}; policies: {', '.join(POLICIES)}")


def _build(config: RunConfig, recipe: LearnerRecipe, target: Path, sandbox_url: str) -> None:
    from piexp.env.splits import build_splits
    from piexp.pretrain.data import TokenSequence, answer_turns, answer_windows, scripted_trajectories, token_sequences
    from piexp.pretrain.fit_process import FitData, fit_in_child
    from piexp.service.tiny_model import copy_tokenizer_files

    started = time.monotonic()
    say(
        f"{LEARNER_MODEL_NAME}: building the base model once for this machine ({target.name}); "
        "it is cached for later runs"
    )
    # The episodes are rendered with the tokenizer the model will use, registered
    # offline under the model's name (the folder does not exist yet).
    tokenizer_dir = register_learner_tokenizer(recipe)
    by_family: dict[str, list[Any]] = {}
    for task in build_splits(config).train:
        by_family.setdefault(task.family, []).append(task)
    # Per family: the first tasks_per_family tasks for the behaviour mix, the rest for
    # the answer windows (oracle only).
    tasks = [t for family in by_family.values() for t in family[: recipe.tasks_per_family]]
    copy_tasks = [t for family in by_family.values() for t in family[recipe.tasks_per_family :]]
    policies = _policy_draw(recipe, [t.family for t in tasks]) + ["oracle"] * len(copy_tasks)
    everything = tasks + copy_tasks
    substitutes = {(family, policy): substitute for family, policy, substitute in recipe.substitutes}
    policies = [substitutes.get((t.family, p), p) for t, p in zip(everything, policies, strict=True)]
    with ProgressReport(f"{LEARNER_MODEL_NAME}: scripted episodes", len(everything)) as progress:
        trajectories, rewards = asyncio.run(scripted_trajectories(config, sandbox_url, everything, policies, progress))
    rolled_out = time.monotonic()

    def sequences(first: int, end: int) -> list[TokenSequence]:
        families = [task.family for task in everything[first:end]]
        return token_sequences(trajectories[first:end], rewards[first:end], policies[first:end], families)

    # The last HELDOUT_TASKS tasks of the mix and HELDOUT_ANSWERS of the copy part
    # measure the fit.
    mix, copy = len(tasks), len(copy_tasks)
    train = sequences(0, mix - HELDOUT_TASKS)
    heldout = sequences(mix - HELDOUT_TASKS, mix)
    whole_turns = answer_turns(sequences(mix, mix + copy - HELDOUT_ANSWERS))
    copies = answer_windows(whole_turns, recipe.copy_window)
    heldout_answers = answer_turns(sequences(mix + copy - HELDOUT_ANSWERS, mix + copy))
    staging = target.with_name(f".{target.name}.building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tokens = sum(int(sum(s.weights)) for s in train)
    with ProgressReport(
        f"{LEARNER_MODEL_NAME}: fitting on {len(train)} sequences ({tokens} target tokens)", recipe.steps, unit="steps"
    ) as progress:
        data = FitData(train, heldout, copies, heldout_answers, whole_turns)
        report, allocator = fit_in_child(staging, recipe, data, progress)
    copy_tokenizer_files(staging, tokenizer_dir)
    by_policy: dict[str, list[float]] = {}
    for policy, reward in zip(policies[:mix], rewards[:mix], strict=True):
        by_policy.setdefault(policy, []).append(reward)
    marker = {
        "model": LEARNER_MODEL_NAME,
        "digest": target.name,
        "recipe": recipe.to_json(),
        "episodes": len(everything),
        "sequences": len(train),
        "target_tokens": tokens,
        "mean_reward_by_policy": {p: sum(r) / len(r) for p, r in sorted(by_policy.items())},
        "rollout_s": round(rolled_out - started, 1),
        "fit_s": round(time.monotonic() - rolled_out, 1),
        "threads": report.threads,
        "fit_allocator": allocator,
        "final_step_nll": report.step_losses[-1],
        "heldout_nll": report.heldout_nll,
        "heldout_token_accuracy": report.heldout_token_accuracy,
        "answer_windows": len(copies),
        "heldout_answers": len(heldout_answers),
        "heldout_answer_accuracy": report.heldout_answer_accuracy,
        "heldout_window_answer_accuracy": report.heldout_window_answer_accuracy,
    }
    (staging / MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    say(
        f"{LEARNER_MODEL_NAME}: built in {time.monotonic() - started:.0f} s (episodes {marker['rollout_s']} s, "
        f"fit {marker['fit_s']} s); held-out NLL {report.heldout_nll:.3f}, "
        f"token accuracy {report.heldout_token_accuracy:.3f}, answers copied {report.heldout_answer_accuracy:.2f} "
        f"(in {recipe.copy_window}-token windows {report.heldout_window_answer_accuracy:.2f})"
    )
