"""The hooks into tinker-cookbook's private API live in `piexp.cookbook_compat` only,
and its start-up check accepts the pinned release and refuses, in one clear message
naming that release, another version or a hook that is missing or has changed shape
(checked with piexp.pinned_hooks, as the SkyRL and tinker SDK hooks are)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from tinker_cookbook.renderers.base import RenderContext

from piexp.cookbook_compat import (
    TINKER_COOKBOOK_VERSION,
    CookbookCompatError,
    adopt_env_class,
    check_cookbook,
    generation_suffix,
)
from piexp.env.episode import WorkspaceEnv, get_run_renderer

ROOT = Path(__file__).resolve().parents[1]


def test_the_check_passes_on_the_pinned_cookbook() -> None:
    assert version("tinker-cookbook") == TINKER_COOKBOOK_VERSION
    check_cookbook()  # the installed version and every hook of HOOKS


def test_a_job_that_trains_nothing_checks_the_hooks_it_uses_without_importing_wandb() -> None:
    """The metrics hook's module imports W&B (about 0.4 s of every command): an eval or a
    check checks every other hook and leaves it unimported; a training job checks it too."""
    script = (
        "import sys\nfrom piexp.cookbook_compat import check_installed_cookbook\n"
        "check_installed_cookbook(training=False)\nprint('wandb' in sys.modules)\n"
        "check_installed_cookbook(training=True)\nprint('wandb' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == ["False", "True"], done.stdout + done.stderr[-2000:]


def test_another_release_is_refused_naming_the_pinned_one() -> None:
    with pytest.raises(CookbookCompatError, match=r"tinker-cookbook 0\.6\.0 is installed, expected 0\.5\.8") as info:
        check_cookbook(installed="0.6.0")
    assert "pip install tinker-cookbook==0.5.8" in str(info.value)


def _check_after(change: str) -> subprocess.CompletedProcess[str]:
    """piexp's start-up check in a fresh interpreter whose installed cookbook was changed
    by ``change`` first (as an upgrade would change it), reported as piexp reports a
    user's error."""
    script = (
        change + "\nfrom piexp.errors import exit_on_user_error\n"
        "from piexp.cookbook_compat import check_cookbook\n"
        "raise SystemExit(exit_on_user_error(check_cookbook))\n"
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)  # fmt: skip


def test_a_moved_hook_is_refused_in_one_paragraph_naming_it() -> None:
    """A release that moved or renamed a hooked method (here: the real class, the method
    deleted) is refused before anything runs, naming the method and the piexp item."""
    done = _check_after(
        "from tinker_cookbook.rl.message_env import EnvFromMessageEnv\ndel EnvFromMessageEnv._render_in_thread"
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "tinker_cookbook.rl.message_env.EnvFromMessageEnv._render_in_thread is missing (moved or renamed)" in message
    assert "used by piexp/cookbook_compat.py item 1" in message and "listed in piexp/cookbook_compat.py" in message


def test_a_hook_whose_parameters_changed_is_refused() -> None:
    done = _check_after(
        "from tinker_cookbook import renderers\nrenderers.Renderer._get_generation_suffix = lambda self, ctx: []"
    )
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert "Renderer._get_generation_suffix takes (self, ctx), piexp passes (self, role, ctx)" in message


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
