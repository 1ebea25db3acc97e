"""Every private tinker-cookbook hook piexp uses, in one place, pinned to the release they
were written against (:data:`TINKER_COOKBOOK_VERSION`) and checked at the start of each
job (and on every service path, by piexp/service/compat/pins.py) by :func:`check_cookbook`
with :mod:`piexp.pinned_hooks`, the check SkyRL's and the tinker SDK's hooks go through
too: another release, or a hook moved, renamed or of another signature, is refused with
one paragraph naming it. An upgrade is a deliberate act: re-check each hook below, then
bump the pin here and in pyproject.toml.

1. **Rendering an observation.** ``EnvFromMessageEnv._render_in_thread`` is where the
   cookbook renders each observation (in a worker thread). :class:`RenderHookEnv`
   overrides it so that a subclass can replace it through the public :meth:`render`,
   and :meth:`RenderHookEnv.render_in_thread` is the cookbook's own.
2. **Choosing the env's class.** ``build_agent_tool_env`` builds an ``EnvFromMessageEnv``
   with no way to pick a subclass; :func:`adopt_env_class` turns that object into one
   (same object and state: ``__class__`` is reassigned, which a subclass adding no
   ``__slots__`` allows).
3. **The generation suffix.** ``Renderer._get_generation_suffix`` gives the tokens the
   generation prompt puts after the assistant header; :func:`generation_suffix` calls it.
4. **A training step's metrics.** ``rl.train.main`` builds its metrics logger with
   ``ml_log.setup_logging`` and offers no way to add to what it logs per step;
   :func:`extra_step_metrics` replaces that function while ``main`` runs by one whose
   logger adds piexp's metrics to every training step's row (``metrics.jsonl``, W&B).
   Its module imports W&B (about 0.4 s), so only a job that trains checks and imports
   it (:data:`TRAINING_HOOKS`). It also calls it with
   ``do_configure_logging_module=False``: the cookbook's own configuration replaces
   every handler of the root logger (piexp's console and the run's job.log) by a console
   handler whose level names are always ANSI-coloured, in a terminal as in a log file;
   piexp keeps its handlers and adds the cookbook's ``logs.log`` as a plain-text file
   beside them.
5. **A group played elsewhere.** ``rl.train.main(rollout_executor=...)`` hands an executor
   ``rollouts._run_rollout_sync`` and a ``rollouts._RolloutTask``; ``rollouts=ray``
   (piexp/launch/ray_rollouts.py) sends the task, its group replaced by one that keeps its
   records (``dataclasses.replace(task, env_group_builder=...)``), to a node, which plays
   it as ``_run_rollout_sync`` would, from the task's fields, but in the node process's one
   event loop (piexp/launch/ray_nodes.py); a group that is not a training group (an
   evaluation during training) plays on the driver the same way, in the loop that hands
   it over (:func:`play_rollout_task`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import Message, RenderContext
from tinker_cookbook.rl.message_env import EnvFromMessageEnv
from tinker_cookbook.rl.types import Env

from piexp.console import add_log_file, remove_log_file
from piexp.errors import ThirdPartyMismatchError
from piexp.pinned_hooks import Hook, Pin, mismatch_paragraph, pin_problems

#: The tinker-cookbook release every hook below was written against.
TINKER_COOKBOOK_VERSION = "0.5.8"


class CookbookCompatError(ThirdPartyMismatchError):
    """The installed tinker-cookbook is not the release piexp's hooks fit."""


#: The hooks of the module docstring, as :mod:`piexp.pinned_hooks` checks them.
HOOKS: tuple[Hook, ...] = (
    Hook("tinker_cookbook.rl.message_env", "EnvFromMessageEnv._render_in_thread", parameters=("self", "messages", "kwargs"),
         used_by="piexp/cookbook_compat.py item 1"),
    Hook("tinker_cookbook.tool_use", "build_agent_tool_env",
         keywords=("renderer", "tools", "initial_messages", "reward_fn", "model_name", "rollout_config", "max_turns",
                   "max_tool_calls", "max_trajectory_tokens", "max_generation_tokens", "context_overflow_reward"),
         used_by="piexp/cookbook_compat.py item 2 (piexp/env/episode.py)"),
    Hook("tinker_cookbook.renderers", "Renderer._get_generation_suffix", parameters=("self", "role", "ctx"),
         used_by="piexp/cookbook_compat.py item 3"),
    Hook("tinker_cookbook.utils.ml_log", "setup_logging",
         parameters=("log_dir", "wandb_project", "wandb_name", "config", "do_configure_logging_module"),
         used_by="piexp/cookbook_compat.py item 4"),
    Hook("tinker_cookbook.utils.ml_log", "Logger.log_metrics", parameters=("self", "metrics", "step"),
         used_by="piexp/cookbook_compat.py item 4 (StepMetricsLogger)"),
    Hook("tinker_cookbook.rl.rollouts", "_run_rollout_sync", parameters=("task",),
         used_by="piexp/cookbook_compat.py item 5 (piexp/launch/ray_rollouts.py's executor; play_rollout_task plays as it does)"),
    Hook("tinker_cookbook.rl.rollouts", "_RolloutTask",
         keywords=("sampling_client", "env_group_builder", "max_tokens", "temperature", "remove_constant_reward_groups",
                   "enable_logging", "strategy", "termination"),
         used_by="piexp/cookbook_compat.py item 5 (play_rollout_task, piexp/launch/ray_rollouts.py)"),
)  # fmt: skip


#: The hooks only training uses (item 4): an eval or a check neither imports nor checks them.
TRAINING_HOOKS: tuple[Hook, ...] = tuple(hook for hook in HOOKS if hook.module == "tinker_cookbook.utils.ml_log")


def cookbook_pin(hooks: Sequence[Hook] = HOOKS) -> Pin:
    """tinker-cookbook's pin: :data:`TINKER_COOKBOOK_VERSION` and ``hooks``."""
    return Pin(
        package="tinker-cookbook",
        version=TINKER_COOKBOOK_VERSION,
        hooks=tuple(hooks),
        home="piexp/cookbook_compat.py",
        install=f"pip install tinker-cookbook=={TINKER_COOKBOOK_VERSION}",
    )


def check_cookbook(installed: str | None = None, hooks: Sequence[Hook] = HOOKS) -> None:
    """Refuse to run unless tinker-cookbook is :data:`TINKER_COOKBOOK_VERSION` and every
    hook is there with the parameters piexp uses. `installed`: the version to check
    (default: this process's); `hooks`: what to check (default: :data:`HOOKS`)."""
    pin = cookbook_pin(hooks)
    problems = pin_problems(pin, installed)
    if problems:
        raise CookbookCompatError(mismatch_paragraph(pin, problems))


@cache
def check_installed_cookbook(training: bool = True) -> None:
    """:func:`check_cookbook` on this process's cookbook, once per process: every hook
    for a job that trains, all but :data:`TRAINING_HOOKS` for one that does not."""
    check_cookbook(hooks=HOOKS if training else tuple(hook for hook in HOOKS if hook not in TRAINING_HOOKS))


class RenderHookEnv(EnvFromMessageEnv):
    """An ``EnvFromMessageEnv`` whose observation rendering a subclass replaces by
    overriding :meth:`render` (hook 1)."""

    async def _render_in_thread(self, messages: list[Message], **kwargs: Any) -> tinker.ModelInput:
        return await self.render(messages, **kwargs)

    async def render(self, messages: list[Message], **kwargs: Any) -> tinker.ModelInput:
        """The observation for `messages`; by default the cookbook's own rendering."""
        return await self.render_in_thread(messages, **kwargs)

    async def render_in_thread(self, messages: list[Message], **kwargs: Any) -> tinker.ModelInput:
        """The cookbook's rendering: ``build_generation_prompt`` in a worker thread."""
        return await EnvFromMessageEnv._render_in_thread(self, messages, **kwargs)


def adopt_env_class(environment: Env, cls: type[RenderHookEnv]) -> Env:
    """`environment` as an instance of `cls` when it is a plain ``EnvFromMessageEnv``
    (hook 2); anything else (another env class) is returned unchanged."""
    if type(environment) is EnvFromMessageEnv:
        environment.__class__ = cls
    return environment


def generation_suffix(renderer: renderers.Renderer, role: str, ctx: RenderContext) -> list[int]:
    """The tokens the generation prompt ends with for `role` (hook 3)."""
    return list(renderer._get_generation_suffix(role, ctx))  # noqa: SLF001 - hook 3


@cache
def step_metrics_logger_class() -> type[Any]:
    """``StepMetricsLogger``: the cookbook's logger, each training step's row (one with
    `progress/batch`, which the training loops log and evaluations alone do not) joined by
    `extra(step)`. A class made on first use, since its base's module imports W&B."""
    from tinker_cookbook.utils import ml_log

    class StepMetricsLogger(ml_log.Logger):
        """The cookbook's logger with piexp's metrics in each training step's row."""

        def __init__(self, inner: ml_log.Logger, extra: Callable[[int], Mapping[str, Any]]) -> None:
            self.inner = inner
            self.extra = extra

        def log_hparams(self, config: Any) -> None:
            self.inner.log_hparams(config)

        def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
            if step is not None and "progress/batch" in metrics:
                metrics = {**metrics, **self.extra(step)}
            self.inner.log_metrics(metrics, step)

        def log_long_text(self, key: str, text: str) -> None:
            self.inner.log_long_text(key, text)

        def close(self) -> None:
            self.inner.close()

        def sync(self) -> None:
            self.inner.sync()

        def get_logger_url(self) -> str | None:
            return self.inner.get_logger_url()

        @property
        def store(self) -> Any:
            return self.inner.store

    return StepMetricsLogger


@contextmanager
def extra_step_metrics(extra: Callable[[int], Mapping[str, Any]]) -> Iterator[None]:
    """While inside, loggers the cookbook sets up add `extra(step)` to each training step's
    metrics (hook 4); the cookbook's own function is back on leaving."""
    from tinker_cookbook.utils import ml_log

    original = ml_log.setup_logging
    log_files: list[logging.Handler] = []

    def setup_logging(log_dir: str, *args: Any, **kwargs: Any) -> ml_log.Logger:
        log_files.append(add_log_file(Path(log_dir) / "logs.log"))
        kwargs["do_configure_logging_module"] = False
        root = logging.getLogger()
        if root.getEffectiveLevel() > logging.INFO:
            root.setLevel(logging.INFO)  # as the cookbook's configuration leaves it: its step tables are INFO
        return step_metrics_logger_class()(original(log_dir, *args, **kwargs), extra)

    ml_log.setup_logging = setup_logging
    try:
        yield
    finally:
        ml_log.setup_logging = original
        for handler in log_files:
            remove_log_file(handler)


async def play_rollout_task(task: Any, env_group_builder: Any = None) -> Any:
    """What the cookbook's ``rollouts._run_rollout_sync(task)`` runs (item 5), awaited in
    the caller's event loop instead of a fresh one; `env_group_builder` replaces the
    task's. Played in place: with the run's rollout executor still set in this context,
    the public entry point would hand the group back to it."""
    from tinker_cookbook.rl.rollouts import do_group_rollout_and_filter_constant_reward, set_rollout_executor

    set_rollout_executor(None)  # this coroutine's own context: the caller's is unchanged
    return await do_group_rollout_and_filter_constant_reward(
        task.sampling_client, env_group_builder or task.env_group_builder, task.max_tokens, task.temperature,
        task.remove_constant_reward_groups, task.enable_logging, strategy=task.strategy, termination=task.termination,
    )  # fmt: skip
