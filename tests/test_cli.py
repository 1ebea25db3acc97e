"""The entry point as a user runs it: real subprocesses in an empty working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def piexp(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "piexp", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_help(tmp_path: Path) -> None:
    result = piexp(tmp_path, "--help")
    assert result.returncode == 0
    assert "family: all, arith" in result.stdout and "mode: check, eval, train" in result.stdout
    assert "algo: agentic, dapo, default, grpo, learn_offline, ppo" in result.stdout
    assert "algo=default|agentic|dapo|grpo|learn_offline|ppo" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_help_is_generated_from_the_registries(tmp_path: Path) -> None:
    """The help is built from the registries, so it cannot advertise a refused policy
    (`policy=null`, now `guess`) or miss a policy or subcommand (`guess`, `show`), as a
    hand-written help and conf/config.yaml's comment did."""
    from piexp.commands import SUBCOMMANDS
    from piexp.config.paths import config_dir
    from piexp.config.schema import EVAL_POLICIES, OFFLINE_POLICIES

    result = piexp(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    usage = result.stdout.split("== Configuration groups ==")[0]
    for name in SUBCOMMANDS:
        assert f"python -m piexp {name} " in usage, name
    assert f"policy={'|'.join(OFFLINE_POLICIES)}" in usage and "policy=model" in usage
    assert "null" not in usage
    assert "experiment=offline" in usage
    comment = next(
        line for line in (config_dir() / "config.yaml").read_text().splitlines() if line.startswith("policy:")
    )
    assert all(f" {policy} " in comment for policy in EVAL_POLICIES), comment
    assert "| null |" not in comment


def test_comma_lists_without_multirun_print_as_lists(tmp_path: Path) -> None:
    result = piexp(tmp_path, "family=arith,csv_agg", "lang=python,javascript", "--cfg", "job")
    assert result.returncode == 0, result.stderr
    assert "lang:\n- python\n- javascript\n" in result.stdout
    assert "  arith:\n" in result.stdout and "  csv_agg:\n" in result.stdout
    assert list(tmp_path.iterdir()) == []


BAD = [
    (["family=nosuch"], "Unknown family option nosuch"),
    (["lang=python,cobol"], "unknown language cobol"),
    (["limits.max_turns=0"], "limits.max_turns"),
    (["reward.weights.answer=-1"], "reward.weights.answer"),
    (["sandbox=remote", "sandbox.url=http://127.0.0.1.example.com:8080/run_code"], "loopback"),
    (["mode=train", "policy=oracle"], "eval-only"),
    (["-m", "limits.max_turns=3,0"], "Sweep job"),
    (["tasks", "n=0"], "n must be a positive integer"),
    (
        ["service=local", "model=tiny-local", "algo.loss_fn=dro"],
        "service=local (SkyRL 0.4.0's Tinker-compatible server, JAX backend) cannot honour algo.loss_fn=dro",
    ),
    (["algo=nosuch"], "Unknown algo option nosuch"),
    # Each refused up front, naming the fix, with nothing written.
    (["-m", "mode=eval", "policy=oracle,null", "family=arith"], "now called `guess`"),
    (["mode=eval", "policy=oracle", "family.arith.max_depth=9"], "max_depth=9 is outside [1, 6]"),
    (
        ["mode=eval", "policy=oracle", "sandbox=remote", "sandbox.url=http://127.0.0.1:9/run_code"],
        "refuses connections",
    ),
    (["preflight=false"], "Did you mean mode.preflight?"),
    (
        ["mode=eval", "policy=oracle", "family=arith", "family.dates.n_bookings=10"],
        "Family dates is not selected (family=arith)",
    ),
    (["family=arith,graphs"], "Unknown family option graphs (did you mean graph or graph_paths?)"),
    (["family="], "family= is empty; give one of: all, arith"),
    (["lang=pyton"], "unknown language pyton in lang (did you mean python?)"),
    (["sumarize", "outputs"], "Unknown subcommand 'sumarize'. Did you mean summarize?"),
    (["mode=eval", "policy=oracle", "algo=grpo"], "training option (mode=train) that mode=eval would ignore"),
    (["mode=check", "policy=wrong"], "policy would be ignored by mode=check"),
    # An option of another mode names the mode that takes it, not "no such option".
    (
        ["mode=eval", "policy=oracle", "family=arith", "mode.max_steps=3"],
        "mode.max_steps is a mode=train option; this command line runs mode=eval, which does not take it. "
        "Add mode=train",
    ),
    (["mode=check", "mode.preflight=false"], "mode.preflight is a mode=eval or mode=train option"),
    # So does a key of another service or sandbox: it would have no effect on this one.
    (
        ["service=tinker", "service.tcmalloc=false", "mode=check"],
        "service.tcmalloc is not a setting of service=tinker: it is a service=local option. Add service=local",
    ),
    (
        ["sandbox=remote", "sandbox.url=http://127.0.0.1:9/run_code", "sandbox.launcher=bwrap", "mode=check"],
        "sandbox.launcher is not a setting of sandbox=remote: it is a sandbox=embedded option",
    ),
    # A mistyped policy gets a suggestion; a mistyped tasks option is not handed to
    # Hydra, which would fail with a LexerNoViableAltException.
    (["mode=eval", "policy=orcale"], "unknown policy 'orcale'. Did you mean oracle?"),
    (["tasks", "family=arith", "--param"], "Unknown option --param for tasks. Did you mean --params?"),
    # An empty run folder would make the working directory the run folder.
    (["mode=eval", "policy=oracle", "family=arith", "hydra.run.dir="], "hydra.run.dir is empty"),
    (["-m", "mode=eval", "policy=oracle,wrong", "family=arith", "hydra.sweep.dir="], "hydra.sweep.dir is empty"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_paragraph_exit_2_nothing_written(tmp_path: Path, args: list[str], fragment: str) -> None:
    result = piexp(tmp_path, *args)
    assert result.returncode == 2, result.stderr
    assert fragment in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("piexp: ") and "\n\n" not in result.stderr.strip()
    assert list(tmp_path.iterdir()) == [], "nothing may be written on a bad command"


def test_training_without_api_key_exits_3_before_anything(tmp_path: Path) -> None:
    result = piexp(tmp_path, "mode=train", "family=arith")
    assert result.returncode == 3
    assert "TINKER_API_KEY" in result.stderr and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_plain_piexp_without_a_key_names_the_offline_default(tmp_path: Path) -> None:
    """Plain `python -m piexp` means training on Tinker and exits 3 without a key; the
    message names the offline default a newcomer without a key wants."""
    result = piexp(tmp_path)
    assert result.returncode == 3, result.stderr
    text = " ".join(result.stderr.split())
    assert "python -m piexp experiment=offline" in text and "Traceback" not in text
    # Beside the scripted policies, the offline way to train.
    assert "python -m piexp service=local model=tiny-local" in text
    assert result.stderr.startswith("piexp: ") and "\n\n" not in result.stderr.strip()
    assert list(tmp_path.iterdir()) == []


def test_training_with_unreachable_service_fails_fast(tmp_path: Path) -> None:
    # Port 9 on loopback: nothing listens, so the probe is refused at once.
    result = piexp(
        tmp_path,
        "mode=train",
        "family=arith",
        "service.base_url=http://127.0.0.1:9",
        "service.connect_timeout_s=3",
        env={"TINKER_API_KEY": "sk-test-not-real"},
    )
    assert result.returncode == 3, result.stderr
    assert "127.0.0.1:9" in result.stderr and "Traceback" not in result.stderr


def test_tasks_preview(tmp_path: Path) -> None:
    result = piexp(tmp_path, "tasks", "family=graph_paths", "n=2", "split=eval", "lang=javascript")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("family=graph_paths") == 2
    assert "Execute it with exactly `node solution.js`" in result.stdout
    assert "split=eval" in result.stdout


def test_too_low_memory_limit_is_named_as_the_cause(tmp_path: Path) -> None:
    """A memory limit too low to start the runtime is named as the cause, with the setting
    to raise, not reported as a broken runtime to install."""
    result = piexp(
        tmp_path,
        "mode=check",
        "family=arith",
        "lang=python",
        "sandbox.memory_limit_mb=1",
        "mode.oracle_tasks_per_cell=1",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    text = " ".join(result.stderr.split())
    assert result.returncode != 0
    assert "sandbox.memory_limit_mb=1 is too low for python to start; raise it" in text, text[-2000:]
    assert "install it" not in text


def test_family_parameters_are_listed_with_range_default_effect_and_examples(tmp_path: Path) -> None:
    """`tasks --params` says what a family's difficulty parameters do (range, default,
    effect, examples), not only conf/family/*.yaml's comments."""
    result = piexp(tmp_path, "tasks", "family=dates", "--params")
    assert result.returncode == 0, result.stderr
    assert "| n_bookings | 1..300 | 80 | data rows in bookings.csv |" in result.stdout
    assert "## Example at the lowest values: n_bookings=1" in result.stdout
    assert "## Example at the defaults" in result.stdout and result.stdout.count("answer: ") == 2
    assert list(tmp_path.iterdir()) == []


def test_the_tinker_sdk_s_deprecations_are_quiet_and_piexp_s_own_are_not() -> None:
    """Every command filters the FutureWarnings the tinker SDK raises from its own or the
    cookbook's code (nothing a user can act on); one raised from piexp's code still shows."""
    import warnings

    from piexp.console import quiet_third_party_deprecations

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party_deprecations()
        for module in ("tinker.lib.public_interfaces.training_client", "tinker_cookbook.rl.train", "piexp.launch.x"):
            warnings.warn_explicit("DEPRECATED", FutureWarning, f"{module}.py", 1, module=module)
    assert [w.filename for w in caught] == ["piexp.launch.x.py"]


def test_composing_a_config_does_not_import_the_rl_stack() -> None:
    """`--cfg job` (and every check made before a run starts, the harness's included) runs
    without torch or tinker-cookbook: printing a config costs a second, not five."""
    import subprocess
    import sys

    for harness in ("builtin", "pi"):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "piexp", f"harness={harness}", "family=arith", "--cfg", "job"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
        assert not imported & {"torch", "tinker_cookbook", "tinker"}, harness
