"""`python -m piexp --help [overrides]`: how to call piexp, generated from what piexp
has (the subcommands of `SUBCOMMANDS`, the policies of the typed schema, the options
of each config group and preset), so it cannot advertise what was renamed or miss what
was added; then the config groups and the composed config, as Hydra's help lays them out.
Hydra's own help stays behind `--hydra-help`."""

from __future__ import annotations

from collections.abc import Sequence

from piexp.commands import SUBCOMMANDS
from piexp.config.compose import compose, group_options
from piexp.config.paths import config_dir
from piexp.config.schema import EVAL_POLICIES, OFFLINE_POLICIES

# Width of the command column of the usage lines.
_COMMAND_COLUMN = 58


def _line(command: str, summary: str) -> str:
    return f"  {command:<{_COMMAND_COLUMN}} {summary}"


def usage() -> str:
    """The usage block: every way to call piexp and the choices a run is made of."""
    algos = group_options("algo")
    algos = ["default", *(name for name in algos if name != "default")] if "default" in algos else algos
    online = [name for name in EVAL_POLICIES if name not in OFFLINE_POLICIES]
    lines = [
        "piexp: RL experiments for coding agents in a Pi-shaped code harness.",
        "",
        "Usage:",
        _line("python -m piexp [group=option ...] [key=value ...]", "one run (comma lists for family/lang are lists)"),
        _line("python -m piexp -m key=a,b,c ...", "a multirun sweep"),
        _line("python -m piexp --config-dir DIR family=NAME ...", "families of your own from DIR/family/NAME.yaml"),
        *(
            _line(f"python -m piexp {name} {command.arguments}", command.summary)
            for name, command in SUBCOMMANDS.items()
        ),
        f"Modes: mode={'|'.join(group_options('mode'))}; without an account: experiment=offline "
        "(a check, then an eval of the oracle).",
        f"Eval policies: mode=eval policy={'|'.join(OFFLINE_POLICIES)} (scripted, offline) or "
        f"policy={'|'.join(online)} (a sampled model; the default).",
        f"Presets: experiment={'|'.join(group_options('experiment'))}.",
        f"RL recipes (mode=train): algo={'|'.join(algos)}, any option as algo.NAME=VALUE.",
    ]
    return "\n".join(lines)


def config_groups() -> str:
    """Each config group and its options (`group: a, b, c`), as Hydra's help lists them."""
    groups = sorted([*(path.name for path in config_dir().iterdir() if path.is_dir()), "experiment"])
    return "\n".join(f"{group}: {', '.join(group_options(group))}" for group in groups)


def render_help(overrides: Sequence[str]) -> str:
    from omegaconf import OmegaConf

    return "\n".join(
        [
            usage(),
            "",
            "== Configuration groups ==",
            "Compose your configuration from those groups (group=option)",
            "",
            config_groups(),
            "",
            "== Config ==",
            "Override anything in the config (foo.bar=value)",
            "",
            OmegaConf.to_yaml(compose(overrides)),
            "Errors in the command line print one paragraph and exit 2 before anything is written.",
            "Powered by Hydra (https://hydra.cc); use --hydra-help for Hydra's own options.",
        ]
    )
