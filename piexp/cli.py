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
    "show": "piexp.commands.show:main",
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
    from piexp.config.argv import is_multirun, split_hydra_flags
    from piexp.launch.run_folder import take_replace_flag

    argv, replace = take_replace_flag(argv)
    rewritten: list[str] = []
    code = exit_on_user_error(lambda: rewritten.extend(_rewritten(argv)))
    if code:
        return code
    argv = rewritten
    flags, overrides = split_hydra_flags(argv)
    if not _INFO_FLAGS.intersection(flags):
        prints_only = bool({"--cfg", "-c"}.intersection(flags))
        code = exit_on_user_error(lambda: _prevalidate(overrides, is_multirun(argv), prints_only, replace))
        if code:
            return code
        if prints_only and is_multirun(argv):
            # Hydra refuses --cfg with -m; show each job's config instead.
            return exit_on_user_error(lambda: _print_sweep_configs(overrides))
    from piexp.launch.job import hydra_entry

    sys.argv = [sys.argv[0] if sys.argv else "piexp", *argv]
    hydra_entry()
    return 0


def _rewritten(argv: list[str]) -> list[str]:
    from piexp.config.argv import rewrite_list_overrides
    from piexp.config.suggest import refuse_unknown_subcommand

    refuse_unknown_subcommand(argv, SUBCOMMANDS)
    return rewrite_list_overrides(argv)


def _print_sweep_configs(overrides: Sequence[str]) -> None:
    from omegaconf import OmegaConf

    from piexp.config.compose import compose, sweep_combinations

    for number, combo in enumerate(sweep_combinations(overrides)):
        config = compose(combo)
        print(f"# sweep job {number}: {' '.join(combo)}")
        print(OmegaConf.to_yaml(config))


def _prevalidate(overrides: Sequence[str], multirun: bool, prints_only: bool, replace: bool) -> None:
    """Everything a user can get wrong, checked before Hydra makes a folder: the config of
    every job, the service key, a remote sandbox that refuses connections, and job
    folders that hold another run (refused, or moved aside with --replace)."""
    from piexp.config.compose import planned_jobs
    from piexp.launch.run_folder import guard_folders, planned_folders
    from piexp.launch.sandbox import refuse_unreachable_remote
    from piexp.launch.service import preflight_tinker, require_api_key

    jobs = planned_jobs(overrides, multirun=multirun)
    configs = [config for _, config in jobs]
    if prints_only:
        return
    if any(config.uses_service and config.service.name == "tinker" for config in configs):
        # Only the key's presence here: reachability is probed inside the job, bounded.
        require_api_key()
    for config in configs:
        if config.uses_service and config.service.name == "selfhosted":
            from piexp.service import placeholder_api_key

            with placeholder_api_key(override=False):  # the probe only needs a key to be set
                preflight_tinker(config.service.url, config.service.connect_timeout_s, url_key="service.url")
    for url in dict.fromkeys(config.sandbox.url for config in configs if config.sandbox.kind == "remote"):
        refuse_unreachable_remote(str(url))
    sweep_dir, folders = planned_folders(overrides, multirun, len(jobs))
    for line in guard_folders(folders, configs, replace=replace):
        print(f"piexp: {line}", file=sys.stderr)
    if sweep_dir is not None:
        from piexp.sweeps import SweepStatus

        # Rows of jobs an earlier, larger sweep left in this folder are not this sweep's.
        SweepStatus(sweep_dir).keep_only(range(len(jobs)))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    if args and args[0] in SUBCOMMANDS:
        command = _subcommand(args[0])
        return exit_on_user_error(lambda: command(args[1:]))
    return _hydra_app(args)


if __name__ == "__main__":
    sys.exit(main())
