"""Every private tinker-cookbook hook piexp uses, in one place, pinned to the release they
were written against (:data:`TINKER_COOKBOOK_VERSION`) and checked at the start of each
job by :func:`check_cookbook`, which refuses another release or a missing hook with a
:class:`~piexp.errors.UserError` (as ``piexp/service/compat/`` does for SkyRL). An
upgrade is a deliberate act: re-check each hook below, then bump the pin here and in
pyproject.toml.

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
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import Message, RenderContext
from tinker_cookbook.rl.message_env import EnvFromMessageEnv
from tinker_cookbook.rl.types import Env
from tinker_cookbook.utils import ml_log

from piexp.errors import UserError

#: The tinker-cookbook release every hook below was written against.
TINKER_COOKBOOK_VERSION = "0.5.8"


class CookbookCompatError(UserError):
    """The installed tinker-cookbook is not the release piexp's hooks fit."""


@dataclass(frozen=True)
class Hook:
    """A private cookbook method (or module function) piexp overrides or calls: where it
    lives, its name, and the leading parameter names piexp relies on."""

    owner: type | types.ModuleType
    name: str
    parameters: tuple[str, ...]

    def problem(self) -> str | None:
        """What is wrong with this hook in the installed cookbook (None: it fits)."""
        owner = self.owner
        where = (
            f"{owner.__name__}.{self.name}"
            if isinstance(owner, types.ModuleType)
            else f"{owner.__module__}.{owner.__qualname__}.{self.name}"
        )
        method = inspect.getattr_static(self.owner, self.name, None)
        if not callable(method):
            return f"{where} is missing"
        found = tuple(inspect.signature(method).parameters)[: len(self.parameters)]
        if found != self.parameters:
            return f"{where} takes ({', '.join(found)}), piexp calls it with ({', '.join(self.parameters)})"
        return None


#: The hooks of the module docstring, as the check sees them.
HOOKS: tuple[Hook, ...] = (
    Hook(EnvFromMessageEnv, "_render_in_thread", ("self", "messages", "kwargs")),
    Hook(renderers.Renderer, "_get_generation_suffix", ("self", "role", "ctx")),
    Hook(ml_log, "setup_logging", ("log_dir", "wandb_project", "wandb_name", "config")),
)


def _installed_version() -> str | None:
    try:
        return version("tinker-cookbook")
    except PackageNotFoundError:
        return None


def check_cookbook(installed: str | None = None, hooks: Sequence[Hook] = HOOKS) -> None:
    """Refuse to run unless tinker-cookbook is :data:`TINKER_COOKBOOK_VERSION` and every
    hook is there with the parameters piexp uses. `installed`: the version to check
    (default: this process's); `hooks`: what to check (default: :data:`HOOKS`)."""
    got = installed if installed is not None else _installed_version()
    problems = []
    if got != TINKER_COOKBOOK_VERSION:
        problems.append(f"tinker-cookbook {got or 'is not installed'} is installed, expected {TINKER_COOKBOOK_VERSION}")
    problems += [problem for hook in hooks if (problem := hook.problem()) is not None]
    if problems:
        raise CookbookCompatError(
            "piexp cannot run on this tinker-cookbook: "
            + "; ".join(problems)
            + f". piexp's hooks into its private API (piexp/cookbook_compat.py) are pinned to "
            f"tinker-cookbook {TINKER_COOKBOOK_VERSION}: install that release "
            f"(`pip install tinker-cookbook=={TINKER_COOKBOOK_VERSION}`), or, after re-checking "
            "each hook against the new release, update the pin."
        )


@cache
def check_installed_cookbook() -> None:
    """:func:`check_cookbook` on this process's cookbook, once per process."""
    check_cookbook()


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


class StepMetricsLogger(ml_log.Logger):
    """The cookbook's logger, each training step's row (one with `progress/batch`, which
    the training loops log and evaluations alone do not) joined by `extra(step)`."""

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


@contextmanager
def extra_step_metrics(extra: Callable[[int], Mapping[str, Any]]) -> Iterator[None]:
    """While inside, loggers the cookbook sets up add `extra(step)` to each training step's
    metrics (hook 4); the cookbook's own function is back on leaving."""
    original = ml_log.setup_logging

    def setup_logging(*args: Any, **kwargs: Any) -> ml_log.Logger:
        return StepMetricsLogger(original(*args, **kwargs), extra)

    ml_log.setup_logging = setup_logging
    try:
        yield
    finally:
        ml_log.setup_logging = original
