"""Subcommands of `python -m piexp`: `run` is the Hydra app behind a command line
without a subcommand (a run, a `-m` sweep, `--cfg job`, `--help`); the others are
named on the command line and listed in `SUBCOMMANDS`, which `--help` lists too."""

from typing import NamedTuple


class Subcommand(NamedTuple):
    target: str  # "module:function" taking the remaining argv
    arguments: str  # what follows the name on the command line, as `--help` shows it
    summary: str  # one line for `--help`
    # Plays episodes or runs a run: a closed stdout or stderr (`... | head`) must not stop
    # it (piexp.console.outlive_closed_streams); the other commands only print, and end
    # quietly when their reader has gone.
    does_work: bool = False


# Imported on use, so `piexp summarize` does not load what `piexp tasks` needs.
SUBCOMMANDS: dict[str, Subcommand] = {
    "tasks": Subcommand("piexp.commands.tasks:main", "[family=...] [n=N] [split=eval] [--params]", "preview tasks"),
    "calibrate": Subcommand(
        "piexp.commands.calibrate:main",
        "[family=...] [policy=...] [levels=1-5] [n=N] [band=0.2-0.8] [--out DIR]",
        "pass@1 per difficulty level, and a preset at the policy's frontier",
        does_work=True,
    ),
    "show": Subcommand(
        "piexp.commands.show:main", "RUN [N] [--failed] [--html]", "a run's episodes, one conversation, the viewer"
    ),
    "summarize": Subcommand("piexp.commands.summarize:main", "DIR", "tables and plots of a run or sweep"),
    "compare": Subcommand(
        "piexp.commands.compare:main", "RUN RUN [...] [--out DIR]", "eval runs side by side, differences with 95% CIs"
    ),
    "reproduce": Subcommand(
        "piexp.commands.reproduce:main", "DIR [--check-only]", "rerun a finished run from its folder", does_work=True
    ),
    "status": Subcommand("piexp.commands.status:main", "DIR [--watch]", "every job's state (dead jobs show as such)"),
    "rescore": Subcommand(
        "piexp.commands.rescore:main",
        "RUN [reward overrides] [--out DIR]",
        "recorded episodes' rewards under other reward settings (no sampling)",
    ),
    "replay": Subcommand(
        "piexp.commands.replay:main",
        "RUN [N ...] [--failed] [--out DIR]",
        "play recorded episodes again through today's tools, sandbox and reward",
        does_work=True,
    ),
    "new-family": Subcommand(
        "piexp.commands.new_family:main",
        "NAME [--dir DIR] [--from-jsonl FILE]",
        "a task family of your own, with its check (docs/families.md)",
    ),
    "export-harbor": Subcommand(
        "piexp.commands.export_harbor:main",
        "[family=...] [lang=...] [split=train|eval|all] --out DIR [--replace]",
        "tasks as Harbor task folders with a digest-pinned dataset.toml (docs/harbor.md)",
    ),
}
