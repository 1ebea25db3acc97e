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
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import Message, RenderContext
from tinker_cookbook.rl.message_env import EnvFromMessageEnv
from tinker_cookbook.rl.types import Env

from piexp.errors import UserError

#: The tinker-cookbook release every hook below was written against.
TINKER_COOKBOOK_VERSION = "0.5.8"


class CookbookCompatError(UserError):
    """The installed tinker-cookbook is not the release piexp's hooks fit."""


@dataclass(frozen=True)
class Hook:
    """A private cookbook method piexp overrides or calls: where it lives, its name, and
    the leading parameter names piexp relies on."""

    owner: type
    name: str
    parameters: tuple[str, ...]

    def problem(self) -> str | None:
        """What is wrong with this hook in the installed cookbook (None: it fits)."""
        where = f"{self.owner.__module__}.{self.owner.__qualname__}.{self.name}"
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
