"""Subcommands of `python -m piexp`: `run` is the Hydra app behind a command line
without a subcommand (a run, a `-m` sweep, `--cfg job`, `--help`); the others are
named on the command line and listed in `SUBCOMMANDS`."""

# Subcommand name -> "module:function" taking the remaining argv (imported on use, so
# `piexp summarize` does not load what `piexp tasks` needs).
SUBCOMMANDS: dict[str, str] = {
    "tasks": "piexp.commands.tasks:main",
    "summarize": "piexp.commands.summarize:main",
    "reproduce": "piexp.commands.reproduce:main",
    "status": "piexp.commands.status:main",
    "show": "piexp.commands.show:main",
    "compare": "piexp.commands.compare:main",
    "new-family": "piexp.commands.new_family:main",
}
