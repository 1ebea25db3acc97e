"""The hooks into tinker-cookbook's private API live in `piexp.cookbook_compat` only,
and its start-up check accepts the pinned release and refuses, in one clear message
naming that release, another version or a hook that is missing or has changed shape."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
from tinker_cookbook import renderers
from tinker_cookbook.renderers.base import RenderContext

from piexp.cookbook_compat import (
    HOOKS,
    TINKER_COOKBOOK_VERSION,
    CookbookCompatError,
    Hook,
    adopt_env_class,
    check_cookbook,
    generation_suffix,
)
from piexp.env.episode import WorkspaceEnv, get_run_renderer

ROOT = Path(__file__).resolve().parents[1]


def test_the_check_passes_on_the_pinned_cookbook() -> None:
    assert version("tinker-cookbook") == TINKER_COOKBOOK_VERSION
    check_cookbook()  # the installed version and every hook of HOOKS


def test_another_release_is_refused_naming_the_pinned_one() -> None:
    with pytest.raises(CookbookCompatError, match=r"tinker-cookbook 0\.6\.0 is installed, expected 0\.5\.8") as info:
        check_cookbook(installed="0.6.0")
    assert "pip install tinker-cookbook==0.5.8" in str(info.value)


def test_a_missing_hook_is_refused_by_name() -> None:
    class RendererWithoutTheHook:  # a cookbook release that dropped the method
        pass

    hook = Hook(RendererWithoutTheHook, "_get_generation_suffix", ("self", "role", "ctx"))
    with pytest.raises(CookbookCompatError, match=r"RendererWithoutTheHook\._get_generation_suffix is missing") as info:
        check_cookbook(installed=TINKER_COOKBOOK_VERSION, hooks=[*HOOKS, hook])
    assert "pinned to tinker-cookbook 0.5.8" in str(info.value)


def test_a_hook_whose_parameters_changed_is_refused() -> None:
    class RendererWithAnotherSuffix(renderers.Renderer):  # type: ignore[misc]
        def _get_generation_suffix(self, ctx: RenderContext) -> list[int]:  # type: ignore[override]
            return []

    hook = Hook(RendererWithAnotherSuffix, "_get_generation_suffix", ("self", "role", "ctx"))
    with pytest.raises(CookbookCompatError, match=r"takes \(self, ctx\), piexp calls it with \(self, role, ctx\)"):
        check_cookbook(installed=TINKER_COOKBOOK_VERSION, hooks=[hook])


def test_the_hooks_work_on_the_pinned_cookbook() -> None:
    renderer = get_run_renderer("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507")
    ctx = RenderContext(idx=1, is_last=True, in_last_assistant_turn=True)
    suffix = generation_suffix(renderer, "assistant", ctx)
    assert suffix and all(isinstance(token, int) for token in suffix)
    other = object()
    assert adopt_env_class(other, WorkspaceEnv) is other and type(other) is object  # not a cookbook env


def test_no_other_module_touches_the_private_hooks() -> None:
    private = re.compile(r"\b(_render_in_thread|_get_generation_suffix)\b|__class__\s*=(?!=)")
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "piexp").rglob("*.py"))
        if path.name != "cookbook_compat.py" and private.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
