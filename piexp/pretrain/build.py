"""Build the `learner-local` model folder once per content key (piexp.pretrain.recipe):
compose the recipe's data config, roll out the scripted mixture on its train tasks in an
embedded sandbox, fit the model, write it with the offline Qwen3 tokenizer and a marker
recording the recipe, the digests, the timings and the held-out fit; concurrent runs
wait on a lock instead of building twice. Older builds are removed once a new one is
complete. Each rollout records, in the models folder's `.inputs/`, the content key its
sources gave, so the next run of the same sources knows its model without rolling out;
a model named before it is built (`learner_model_dir`, for the run-folder guard) leaves
its episodes there for the build."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.config.schema import RunConfig
from piexp.console import ProgressReport, say
from piexp.files import exclusive_lock
from piexp.pretrain.data import Rollout
from piexp.pretrain.fit_process import FitData
from piexp.pretrain.recipe import LearnerRecipe, content_key, files_digest, inputs_digest

LEARNER_MODEL_NAME = "learner-local"
#: The base models piexp builds, by model name: the reference environment's, and one
#: pre-trained on episodes of both harnesses, half played through the real Pi, so that
#: one base model acts in either (a model pre-trained on builtin episodes alone never
#: calls a tool in Pi: it has never seen Pi's prompt, tool schemas or plain-text results).
LEARNER_RECIPES = {
    LEARNER_MODEL_NAME: LearnerRecipe(),
    # Twice learner-local's optimiser steps: each harness has half its episodes, and at
    # learner-local's 600 steps the fit reached held-out token accuracy 0.994 (0.998 for
    # learner-local), its ~200-token programs broke somewhere nearly always, and pass@1
    # was 0.000 in both harnesses (bench/learning.py --harness=pi, docs/harness.md).
    f"{LEARNER_MODEL_NAME}-pi": LearnerRecipe(harnesses=("builtin", "pi"), steps=1200, whole_turns_from_step=600),
}
RECIPE = LEARNER_RECIPES[LEARNER_MODEL_NAME]
MARKER = "piexp_learner_model.json"
#: Train tasks kept out of the fit, to measure it (held-out NLL and token accuracy).
HELDOUT_TASKS = 12
#: Answer-turn tasks kept out of the fit, to measure the copy of the printed answer.
HELDOUT_ANSWERS = 100
#: The piexp package whose sources `inputs_digest` reads.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
#: The models folder's memo of content keys, one file per inputs digest.
INPUTS_MEMO = ".inputs"


SandboxOpener = Callable[[], contextlib.AbstractContextManager[str]]
#: How to play scripted episodes in a harness other than the reference environment, by
#: its name (the caller makes the harness: this layer sits below the harnesses).
Rollouts = Mapping[str, Rollout]


def _models_root(recipe: LearnerRecipe = RECIPE) -> Path:
    """learner-local's builds; a recipe that withholds behaviours (a variant a bench
    builds) keeps its own, so that neither removes the other's as stale."""
    from piexp.tokenizer import piexp_cache_dir

    name = learner_name(recipe) if not recipe.substitutes else f"{LEARNER_MODEL_NAME}-variants"
    return piexp_cache_dir() / "models" / name


def learner_name(recipe: LearnerRecipe) -> str:
    """The model name of a recipe of `LEARNER_RECIPES` (its builds' folder), or the name
    of the one it varies."""
    return next((name for name, known in LEARNER_RECIPES.items() if known.harnesses == recipe.harnesses),
                f"{LEARNER_MODEL_NAME}-{'-'.join(recipe.harnesses)}")  # fmt: skip


def data_config(recipe: LearnerRecipe = RECIPE) -> RunConfig:
    from piexp.config.compose import load

    tasks = recipe.tasks_per_family + recipe.copy_tasks_per_family
    return load([*recipe.data_overrides, f"tasks.train_per_family={tasks}"])


def _inputs_digest(config: RunConfig, recipe: LearnerRecipe) -> str:
    shaping = {
        "families": config.families,
        "family": config.model_dump(mode="json")["family"],
        "languages": config.train_languages,
        "limits": config.limits.model_dump(mode="json"),
        "reward": config.reward.model_dump(mode="json"),
        "renderer": config.model.renderer,
        "seed": config.seed,
    }
    return inputs_digest(recipe, PACKAGE_ROOT, shaping)


def _memo_path(recipe: LearnerRecipe, config: RunConfig) -> Path:
    return _models_root(recipe) / INPUTS_MEMO / f"{_inputs_digest(config, recipe)}.json"


def _remembered_key(memo: Path) -> str | None:
    try:
        key = json.loads(memo.read_text(encoding="utf-8"))["content_key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return key if isinstance(key, str) else None


def known_learner_model_dir(recipe: LearnerRecipe = RECIPE) -> Path | None:
    """The model folder for `recipe` when this machine has rolled out these sources'
    episodes before (built or not), else None; rolls nothing out."""
    key = _remembered_key(_memo_path(recipe, data_config(recipe)))
    return None if key is None else _models_root(recipe) / key


def learner_model_dir(
    open_sandbox: SandboxOpener, recipe: LearnerRecipe = RECIPE, rollouts: Rollouts | None = None
) -> Path:
    """The model folder for `recipe` (built or not): remembered, or learnt by rolling the
    episodes out in `open_sandbox()` (about a third of a build) without fitting."""
    known = known_learner_model_dir(recipe)
    if known is not None:
        return known
    config = data_config(recipe)
    _check_substitutes(recipe, config)
    with open_sandbox() as sandbox_url:
        episodes = _scripted_episodes(config, recipe, sandbox_url, rollouts)
    target = _models_root(recipe) / _remember(config, recipe, episodes)
    if read_marker(target) is None:  # kept for its build (in this process or a job's), which would roll them out again
        _write_atomically(_unfitted_path(recipe, config), pickle.dumps(episodes))
    return target


def _unfitted_path(recipe: LearnerRecipe, config: RunConfig) -> Path:
    """Where `learner_model_dir` leaves the episodes of a model it named but did not build
    (about 55 MB for learner-local), for the build to take instead of rolling them out."""
    return _memo_path(recipe, config).with_suffix(".episodes.pickle")


def _take_unfitted(recipe: LearnerRecipe, config: RunConfig) -> _Episodes | None:
    path = _unfitted_path(recipe, config)
    try:
        episodes = pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
        return None
    return episodes if isinstance(episodes, _Episodes) else None


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    written = path.with_name(f".{path.name}.{os.getpid()}")
    written.write_bytes(data)
    written.replace(path)


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
    from piexp.tokenizer import offline_qwen3_tokenizer_dir, register_offline_tokenizer

    tokenizer_dir = offline_qwen3_tokenizer_dir(recipe.bpe_tokens)
    # Under the recipe's model name and learner-local's, the model its data config names.
    for name in {LEARNER_MODEL_NAME, learner_name(recipe)}:
        register_offline_tokenizer(name, str(tokenizer_dir))
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


def ensure_learner_model(
    open_sandbox: SandboxOpener, recipe: LearnerRecipe = RECIPE, rollouts: Rollouts | None = None
) -> Path:
    """The model folder for `recipe`, built first if this machine has no build of it;
    `open_sandbox()` yields a /run_code URL for the build's episodes (the caller's
    sandbox settings; opened only when the episodes must be rolled out: sources this
    machine has not rolled out, or a model not built yet)."""
    config = data_config(recipe)
    _check_substitutes(recipe, config)
    known = known_learner_model_dir(recipe)
    if known is not None and read_marker(known) is not None:
        return known
    root = _models_root(recipe)
    with exclusive_lock(root / ".build.lock"):  # another run building the same model: wait for it
        known = known_learner_model_dir(recipe)
        unfitted = _take_unfitted(recipe, config) if known is not None and read_marker(known) is None else None
        if known is not None and read_marker(known) is not None:
            target = known
        elif known is not None and unfitted is not None:  # named before, by `learner_model_dir`
            target = known
            _fit(recipe, target, unfitted)
        else:
            with open_sandbox() as sandbox_url:
                episodes = _scripted_episodes(config, recipe, sandbox_url, rollouts)
            target = root / _remember(config, recipe, episodes)
            if read_marker(target) is None:  # else the same data as a build here: no fit
                _fit(recipe, target, episodes)
    for stale in target.parent.iterdir():
        if stale.is_dir() and stale != target and not stale.name.startswith("."):
            shutil.rmtree(stale, ignore_errors=True)
    # Episodes left for a build that is done, or for models of other sources (named by a
    # run-folder guard, never built): about 55 MB each.
    for left in (root / INPUTS_MEMO).glob("*.episodes.pickle"):
        left.unlink(missing_ok=True)
    return target


def _check_substitutes(recipe: LearnerRecipe, config: RunConfig) -> None:
    from piexp.policies import POLICIES

    for family, policy, substitute in recipe.substitutes:
        if family not in config.families:
            raise ValueError(f"the recipe withholds {policy!r} from {family!r}, which its data has not")
        if {policy, substitute} - set(POLICIES):
            raise ValueError(f"the recipe substitutes {substitute!r} for {policy!r}; policies: {', '.join(POLICIES)}")


@dataclass(frozen=True)
class _Episodes:
    """A rollout of the recipe's scripted episodes: the fit's data and what the marker
    records of it."""

    data: FitData
    episodes: int
    mean_reward_by_policy: dict[str, float]
    rollout_s: float
    tokenizer_dir: Path


def _scripted_episodes(
    config: RunConfig, recipe: LearnerRecipe, sandbox_url: str, rollouts: Rollouts | None
) -> _Episodes:
    from piexp.env.splits import build_splits
    from piexp.pretrain.data import TokenSequence, answer_turns, answer_windows, harness_trajectories, token_sequences

    started = time.monotonic()
    name = learner_name(recipe)
    say(f"{name}: rolling out its scripted episodes, whose tokens name the model these sources make")
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
    with ProgressReport(f"{name}: scripted episodes", len(everything)) as progress:
        trajectories, rewards = asyncio.run(
            harness_trajectories(config, sandbox_url, everything, policies, recipe.harnesses, rollouts or {}, progress)
        )

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
    by_policy: dict[str, list[float]] = {}
    for policy, reward in zip(policies[:mix], rewards[:mix], strict=True):
        by_policy.setdefault(policy, []).append(reward)
    return _Episodes(
        data=FitData(train, heldout, copies, heldout_answers, whole_turns),
        episodes=len(everything),
        mean_reward_by_policy={p: sum(r) / len(r) for p, r in sorted(by_policy.items())},
        rollout_s=round(time.monotonic() - started, 1),
        tokenizer_dir=tokenizer_dir,
    )


def _digests(recipe: LearnerRecipe, episodes: _Episodes) -> dict[str, str]:
    from piexp.pretrain.fit_process import data_digest, fit_digest

    tokenizer_files = [p for p in episodes.tokenizer_dir.iterdir() if _is_tokenizer_file(p)]
    digests = {"tokenizer": files_digest(tokenizer_files), "data": data_digest(episodes.data), "fit": fit_digest()}
    return {"content_key": content_key(recipe, **digests), **digests}


def _is_tokenizer_file(path: Path) -> bool:
    """The tokenizer files a build copies into its model folder (copy_tokenizer_files)."""
    return path.name.startswith("tokenizer") or path.name == "special_tokens_map.json"


def _remember(config: RunConfig, recipe: LearnerRecipe, episodes: _Episodes) -> str:
    """Record the content key of this rollout under its sources' inputs digest, and
    return it."""
    digests = _digests(recipe, episodes)
    _write_atomically(_memo_path(recipe, config), json.dumps(digests, indent=2).encode())
    return digests["content_key"]


def _fit(recipe: LearnerRecipe, target: Path, episodes: _Episodes) -> None:
    from piexp.pretrain.fit_process import fit_in_child
    from piexp.service.tiny_model import copy_tokenizer_files

    started = time.monotonic()
    say(
        f"{learner_name(recipe)}: building the base model once for this machine ({target.name}); "
        "it is cached for later runs"
    )
    train = episodes.data.train
    staging = target.with_name(f".{target.name}.building")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tokens = sum(int(sum(s.weights)) for s in train)
    fit_started = time.monotonic()
    with ProgressReport(
        f"{learner_name(recipe)}: fitting on {len(train)} sequences ({tokens} target tokens)",
        recipe.steps,
        unit="steps",
    ) as progress:
        report, allocator = fit_in_child(staging, recipe, episodes.data, progress)
    copy_tokenizer_files(staging, episodes.tokenizer_dir)
    marker = {
        "model": learner_name(recipe),
        "digest": target.name,
        "recipe": recipe.to_json(),
        "episodes": episodes.episodes,
        "sequences": len(train),
        "target_tokens": tokens,
        "mean_reward_by_policy": episodes.mean_reward_by_policy,
        "rollout_s": episodes.rollout_s,
        "fit_s": round(time.monotonic() - fit_started, 1),
        "threads": report.threads,
        "fit_allocator": allocator,
        "final_step_nll": report.step_losses[-1],
        "heldout_nll": report.heldout_nll,
        "heldout_token_accuracy": report.heldout_token_accuracy,
        "answer_windows": len(episodes.data.copies),
        "heldout_answers": len(episodes.data.heldout_answers),
        "heldout_answer_accuracy": report.heldout_answer_accuracy,
        "heldout_window_answer_accuracy": report.heldout_window_answer_accuracy,
    }
    (staging / MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    say(
        f"{learner_name(recipe)}: built in {episodes.rollout_s + time.monotonic() - started:.0f} s (episodes "
        f"{marker['rollout_s']} s, fit {marker['fit_s']} s); held-out NLL {report.heldout_nll:.3f}, "
        f"token accuracy {report.heldout_token_accuracy:.3f}, answers copied {report.heldout_answer_accuracy:.2f} "
        f"(in {recipe.copy_window}-token windows {report.heldout_window_answer_accuracy:.2f})"
    )
