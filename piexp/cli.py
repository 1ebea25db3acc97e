"""piexp's single entry point: `python -m piexp [SUBCOMMAND] [overrides...]`.

Without a subcommand it is a Hydra app (runs, `-m` sweeps, `--cfg job`, `--help`).
Every command line is validated before Hydra creates a run folder, so a bad value
prints one paragraph, exits 2 and writes nothing.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Callable, Sequence

from piexp.errors import UserError

SUBCOMMANDS: dict[str, str] = {
    "tasks": "piexp.commands.tasks:main",
    "summarize": "piexp.commands.summarize:main",
    "reproduce": "piexp.commands.reproduce:main",
    "status": "piexp.commands.status:main",
    "compare": "piexp.commands.compare:main",
}
_INFO_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--version", "--shell-completion", "-sc"}


def report_user_error(error: UserError) -> None:
    """Print a user error as one wrapped paragraph on stderr (no traceback)."""
    text = " ".join(str(error).split())
    print(textwrap.fill(f"piexp: {text}", width=100), file=sys.stderr)


def exit_on_user_error(function: Callable[[], int | None]) -> int:
    try:
        return int(function() or 0)
    except UserError as error:
        report_user_error(error)
        return error.exit_code
    except KeyboardInterrupt:
        print("piexp: interrupted", file=sys.stderr)
        return 130


def _subcommand(name: str) -> Callable[[list[str]], int | None]:
    module_name, function_name = SUBCOMMANDS[name].split(":")
    import importlib

    return getattr(importlib.import_module(module_name), function_name)


def _hydra_app(argv: list[str]) -> int:
    from piexp.config.argv import is_multirun, rewrite_list_overrides, split_hydra_flags
    from piexp.config.compose import validate_command_line

    argv = rewrite_list_overrides(argv)
    flags, overrides = split_hydra_flags(argv)
    if not _INFO_FLAGS.intersection(flags):
        prints_only = bool({"--cfg", "-c"}.intersection(flags))
        code = exit_on_user_error(
            lambda: _prevalidate(overrides, is_multirun(argv), validate_command_line, prints_only)
        )
        if code:
            return code
        if prints_only and is_multirun(argv):
            # Hydra refuses --cfg with -m; show each job's config instead.
            return exit_on_user_error(lambda: _print_sweep_configs(overrides))
    from piexp.launch.job import hydra_entry

    sys.argv = [sys.argv[0] if sys.argv else "piexp", *argv]
    hydra_entry()
    return 0


def _print_sweep_configs(overrides: Sequence[str]) -> None:
    from omegaconf import OmegaConf

    from piexp.config.compose import compose, sweep_combinations

    for number, combo in enumerate(sweep_combinations(overrides)):
        config = compose(combo)
        print(f"# sweep job {number}: {' '.join(combo)}")
        print(OmegaConf.to_yaml(config))


def _prevalidate(
    overrides: Sequence[str], multirun: bool, validate: Callable[..., list], prints_only: bool
) -> None:
    from piexp.launch.service import require_api_key

    configs = validate(overrides, multirun=multirun)
    if not prints_only and any(config.uses_service and config.service.name == "tinker" for config in configs):
        # Only the key's presence here: reachability is probed inside the job, bounded.
        require_api_key()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    if args and args[0] in SUBCOMMANDS:
        command = _subcommand(args[0])
        return exit_on_user_error(lambda: command(args[1:]))
    return _hydra_app(args)


if __name__ == "__main__":
    sys.exit(main())
