"""A run or a sweep: `python -m piexp [overrides...]` without a subcommand, handed to
Hydra (`-m` sweeps, `--cfg job`) after every command line is validated, so a bad value
prints one paragraph, exits 2 and writes nothing (`piexp reproduce` goes through the
same checks). `--help` is piexp's own (`piexp.commands.help`); Ctrl-C ends a run or a
sweep with one line saying how to resume and exit code 130."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from piexp.commands import SUBCOMMANDS
from piexp.config.argv import is_multirun, rewrite_list_overrides, split_hydra_flags
from piexp.config.compose import compose, planned_jobs, sweep_combinations
from piexp.config.hydra_compose import composing_once
from piexp.config.schema import RunConfig
from piexp.config.search_path import take_config_dir, with_search_path
from piexp.config.suggest import refuse_unknown_subcommand
from piexp.tasks import build_splits as build_task_splits
from piexp.tasks import split_entry
from piexp.tasks.registry import is_builtin
from piexp.errors import exit_on_user_error
from piexp.launch.folder_guard import REPLACE_ENV, guard_folders, planned_folders, take_replace_flag
from piexp.launch.sandbox import refuse_unreachable_remote
from piexp.service import placeholder_api_key
from piexp.service.tinker_preflight import preflight_tinker, require_api_key
from piexp.sweeps import SweepStatus

#: How long a sweep's jobs get after Ctrl-C to stop their sandboxes and record themselves
#: interrupted (about 2 s on an idle machine) before what is left of them is killed.
_SWEEP_CLEAN_UP_S = 30.0

# Flags that only print (help, version, completion): nothing to validate.
_INFO_FLAGS = {"--help", "-h", "--hydra-help", "--info", "-i", "--version", "--shell-completion", "-sc"}


def main(argv: list[str]) -> int:
    """Validate the command line, then run it as a Hydra app; returns the exit code."""
    argv, replace = take_replace_flag(argv)
    rewritten: list[str] = []
    code = exit_on_user_error(lambda: rewritten.extend(_rewritten(argv)))
    if code:
        return code
    argv = rewritten
    flags, overrides = split_hydra_flags(argv)
    if {"--help", "-h"}.intersection(flags):
        # piexp's own help, generated from its registries (Hydra's is --hydra-help).
        from piexp.commands.help import render_help

        return exit_on_user_error(lambda: print(render_help(overrides)))
    sweep_dirs: list[Path | None] = []
    if not _INFO_FLAGS.intersection(flags):
        prints_only = bool({"--cfg", "-c"}.intersection(flags))
        code = exit_on_user_error(
            lambda: sweep_dirs.append(prevalidate(overrides, is_multirun(argv), prints_only, replace))
        )
        if code:
            return code
        if prints_only and is_multirun(argv):
            # Hydra refuses --cfg with -m; show each job's config instead.
            return exit_on_user_error(lambda: _print_sweep_configs(overrides))
    # Hydra itself (its app, launchers and plugins) loads only for a run that goes ahead.
    from piexp.launch.job import SWEEP_PROCESS_ENV, hydra_entry

    # The jobs check their own folders too (those the planner cannot name); they inherit this.
    os.environ[REPLACE_ENV] = "1" if replace else "0"
    os.environ[SWEEP_PROCESS_ENV] = str(os.getpid())

    sweep_dir = sweep_dirs[0] if sweep_dirs else None
    if sweep_dir is not None and not any(o.split("=", 1)[0].lstrip("+") == "hydra.sweep.dir" for o in overrides):
        # The sweep folder the guard checked, not one Hydra names a second later from the
        # clock; and the folder a resume line can name.
        argv = [*argv, f"hydra.sweep.dir={sweep_dir}"]
    sys.argv = [sys.argv[0] if sys.argv else "piexp", *argv]
    try:
        hydra_entry()
    except KeyboardInterrupt:
        # A single run's job says how to resume itself; this is Ctrl-C in a sweep (joblib
        # would print its own traceback) or before a run's job began.
        if sweep_dir is None:
            print("piexp: interrupted", file=sys.stderr)
        else:
            from piexp.launch.child_processes import end_child_processes

            killed = end_child_processes(_SWEEP_CLEAN_UP_S)
            if killed:
                print(
                    f"piexp: {len(killed)} of the sweep's processes had not ended {_SWEEP_CLEAN_UP_S:g} s after "
                    f"Ctrl-C and were killed (pids {', '.join(map(str, killed))})",
                    file=sys.stderr,
                )
            print(
                f"piexp: interrupted; the sweep's finished jobs are kept. Resume with the same command and "
                f"hydra.sweep.dir={sweep_dir} (finished jobs are skipped).",
                file=sys.stderr,
            )
        return 130
    return 0


def _rewritten(argv: list[str]) -> list[str]:
    refuse_unknown_subcommand(argv, SUBCOMMANDS)
    # --config-dir DIR becomes a search path entry with DIR absolute (Hydra's app and the
    # validation read the same one), with the entry-point packages' folders after it.
    return with_search_path(take_config_dir(rewrite_list_overrides(argv)))


def _print_sweep_configs(overrides: Sequence[str]) -> None:
    from omegaconf import OmegaConf

    for number, combo in enumerate(sweep_combinations(overrides)):
        config = compose(combo)
        print(f"# sweep job {number}: {' '.join(combo)}")
        print(OmegaConf.to_yaml(config))


def verify_tasks(configs: Sequence[RunConfig]) -> None:
    """Build the tasks of every family piexp does not ship, now and twice each, and run
    their references on a first task of each split: a generator that raises, returns a
    bad answer or is not deterministic, a task file with a bad line, or a reference that
    crashes or prints another number is refused before a folder exists. The built-ins
    are proven so by piexp's own tests; identical jobs are verified once."""
    seen: set[str] = set()
    for config in configs:
        mine = [name for name in config.families if not is_builtin(name, split_entry(config.family[name])[0])]
        key = json.dumps(
            [{name: config.family[name] for name in mine}, config.seed, config.tasks.model_dump(), config.lang,
             config.eval_lang, config.needs_references, config.sandbox.model_dump()]
        )  # fmt: skip
        if mine and key not in seen:
            seen.add(key)
            train, evals, _report = build_task_splits(
                config.tasks.train_per_family,
                config.tasks.eval_per_family,
                config.seed,
                mine,
                config.family,
                verify_determinism=True,
            )
            # Imported here: the sandbox client loads only for a run with families of its own.
            from piexp.launch.reference_check import refuse_wrong_references

            refuse_wrong_references(config, [*train, *evals])


def prevalidate(overrides: Sequence[str], multirun: bool, prints_only: bool, replace: bool) -> Path | None:
    """Everything a user can get wrong, checked before Hydra makes a folder: the config of
    every job, its harness (importable, installed), the service key, a remote sandbox that refuses connections,
    rollouts=ray without Ray or without a cluster at its address, and job
    folders that hold another run (refused, or moved aside with --replace). Returns the
    sweep folder of a sweep (None for a single run, or when only printing)."""
    with composing_once():  # the same overrides are composed for the jobs and their folders
        return _prevalidate(overrides, multirun, prints_only, replace)


def _prevalidate(overrides: Sequence[str], multirun: bool, prints_only: bool, replace: bool) -> Path | None:
    jobs = planned_jobs(overrides, multirun=multirun)
    configs = [config for _, config in jobs]
    if prints_only:
        return None
    projects = sorted({project for config in configs if (project := getattr(config.mode, "wandb_project", None))})
    if projects:
        from piexp.launch.result_logging import offline_note, wandb_credentials

        local_mode = wandb_credentials(f"mode.wandb_project={','.join(projects)}")
        if local_mode:
            print(f"piexp: {offline_note(local_mode)}", file=sys.stderr)
    from piexp.harness.base import refuse_unusable_harness

    for config in configs:
        # harness=pi before `make setup` or with options Pi cannot run under, a runtime
        # missing where the harness runs programs, an unknown _target_, training where it cannot
        refuse_unusable_harness(config)
    verify_tasks(configs)
    if any(config.uses_service and config.service.name == "tinker" for config in configs):
        # Only the key's presence here: reachability is probed inside the job, bounded.
        require_api_key()
    for config in configs:
        if config.uses_service and config.service.name == "selfhosted":
            with placeholder_api_key(override=False):  # the probe only needs a key to be set
                preflight_tinker(config.service.url, config.service.connect_timeout_s, url_key="service.url")
    for url in dict.fromkeys(config.sandbox.url for config in configs if config.sandbox.kind == "remote"):
        refuse_unreachable_remote(str(url))
    from piexp.launch.ray_rollouts import refuse_unusable_rollouts

    for rollouts in {config.rollouts.model_dump_json(): config.rollouts for config in configs}.values():
        refuse_unusable_rollouts(rollouts)  # Ray not installed; an address no cluster answers at
    sweep_dir, folders = planned_folders(overrides, multirun, len(jobs))
    for line in guard_folders(folders, configs, replace=replace):
        print(f"piexp: {line}", file=sys.stderr)
    if sweep_dir is not None:
        # Rows of jobs an earlier, larger sweep left in this folder are not this sweep's.
        SweepStatus(sweep_dir).keep_only(range(len(jobs)))
    return sweep_dir
