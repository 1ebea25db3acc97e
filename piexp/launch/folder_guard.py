"""Never lose or mix results: every folder a run or sweep job runs into is checked
against the run it already holds before anything is written into it.

A folder's `.hydra/config.yaml` and `overrides.yaml` record what its results are, so a
rerun with another config must never touch them. A folder that holds a piexp run is
compared with the job's validated config: the same config resumes (so does a train run
given a larger `mode.max_steps`: it trains on from its last checkpoint), another one is
refused naming the folder, the differing keys and the two ways out (so is the same config
on another base model than the held run used: a rebuilt `learner-local`), unless `--replace`
is given, which moves the old folder aside (`<folder>.replaced-<UTC time>`), never
deletes it. The check runs twice with the same `guard_folders`: before launch, on every
folder the command line names (`hydra.run.dir`, `hydra.sweep.dir`/job number for the
first validated jobs), so a refused sweep starts no job; and inside each job
(`claim_job_folder`), which covers the folders only Hydra can name (a custom
`hydra.sweep.subdir`, jobs past the validated ones). That in-job check comes first: Hydra
is set to write nothing into a job folder (`hydra.output_subdir: null`, no job-log file
handler; both are refused if changed) and piexp writes the `.hydra/` record itself once
the folder is free or holds the same run.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import os
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from piexp.config.schema import RunConfig
from piexp.errors import UserError

# The command-line flag that moves a folder holding another run aside.
REPLACE_FLAG = "--replace"
# How `--replace` reaches the jobs (their processes inherit the launcher's environment);
# set by the CLI itself, never needed by hand.
REPLACE_ENV = "PIEXP_REPLACE_HELD_RUNS"
# Where a run folder keeps the record of its run (Hydra's own name for it).
RECORD_SUBDIR = RunFolder.RECORD_SUBDIR


def take_replace_flag(argv: Sequence[str]) -> tuple[list[str], bool]:
    """argv without `--replace`, and whether it was there (Hydra does not know the flag)."""
    return [arg for arg in argv if arg != REPLACE_FLAG], REPLACE_FLAG in argv


def planned_folders(overrides: Sequence[str], multirun: bool, count: int) -> tuple[Path | None, list[Path | None]]:
    """The sweep folder (None for a single run) and the folder of each of `count` jobs,
    as Hydra will name them (None where a custom `hydra.sweep.subdir` hides it)."""
    from piexp.config.compose import compose, sweep_combinations

    fixed = next(iter(sweep_combinations(overrides)), list(overrides))
    cfg = compose(fixed, with_hydra=True)
    _refuse_hydra_writing_into_jobs(cfg)
    multirun = multirun or str(OmegaConf.select(cfg, "hydra.mode") or "").endswith("MULTIRUN")
    if not multirun:
        return None, [Path(_folder_setting(cfg, "hydra.run.dir"))]
    sweep_dir = Path(_folder_setting(cfg, "hydra.sweep.dir"))
    subdir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir")  # type: ignore[union-attr]
    if subdir != "${hydra.job.num}":
        return sweep_dir, [None] * count
    return sweep_dir, [sweep_dir / str(number) for number in range(count)]


def _folder_setting(cfg: DictConfig, key: str) -> str:
    """The folder `key` names; an empty one is refused: Hydra would make the working
    directory itself the run folder and write the run's files among whatever is there."""
    value = OmegaConf.select(cfg, key)
    if value is None or not str(value).strip():
        raise UserError(
            f"{key} is empty: piexp would write into the current folder, among whatever is there. "
            f"Name a folder ({key}=outputs/my-run), or leave {key} out for a new dated one."
        )
    return str(value)


def _refuse_hydra_writing_into_jobs(cfg: DictConfig) -> None:
    """Hydra must leave a job folder alone until the in-job guard has looked at it."""
    if OmegaConf.select(cfg, "hydra.output_subdir") is not None:
        raise UserError(
            "hydra.output_subdir cannot be set: piexp writes a run's record (.hydra/config.yaml, hydra.yaml, "
            "overrides.yaml) itself, after checking that the folder holds no other run. Drop the setting."
        )
    handlers = OmegaConf.to_container(OmegaConf.select(cfg, "hydra.job_logging.handlers") or {}, resolve=False)
    if any(isinstance(handler, dict) and "filename" in handler for handler in handlers.values()):  # type: ignore[union-attr]
        raise UserError(
            "hydra/job_logging with a log file cannot be used: piexp writes job.log into the run folder itself, "
            "after checking that the folder holds no other run. Use hydra/job_logging=stdout (the default), "
            "disabled or none."
        )


def _held_run(folder: Path) -> tuple[RunConfig | None, str | None]:
    """The validated config of the run `folder` holds (None, None when it holds none),
    or (None, why) when its saved config cannot be read by this piexp."""
    from piexp.config.compose import validate_saved

    if not (folder / RunFolder.CONFIG).is_file():
        return None, None
    try:
        return validate_saved(RunFolder(folder).config(), folder), None
    except Exception as error:  # a corrupt or older config: still another run's folder
        return None, " ".join(str(error).split())[:300]


def folder_conflict(folder: Path, config: RunConfig) -> str | None:
    """Why `folder` holds a different run than `config` (None when it holds none or the same)."""
    from piexp.config.differences import config_differences, shown
    from piexp.launch.base_model import base_model_change

    held, unreadable = _held_run(folder)
    if unreadable is not None:
        return f"its saved config cannot be read by this piexp ({unreadable})"
    if held is None:
        return None
    # Training longer is a continuation, not another run: a train run rerun with a
    # larger mode.max_steps resumes from its last checkpoint.
    longer = held.mode.name == config.mode.name == "train" and getattr(held.mode, "max_steps", 0) < getattr(
        config.mode, "max_steps", 0
    )
    differences = config_differences(
        held.model_dump(mode="json"),
        config.model_dump(mode="json"),
        ignore=frozenset({"mode.max_steps"} if longer else ()),
    )
    if differences:
        return f"differing keys (held -> new): {shown(differences)}"
    return base_model_change(folder, config)  # the same config on other weights is another run too


def move_aside(folder: Path) -> Path:
    """Rename `folder` to `<folder>.replaced-<UTC time>` (unique), and return the new path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target, n = folder.with_name(f"{folder.name}{RunFolder.REPLACED_MARK}{stamp}"), 1
    while target.exists():
        target, n = folder.with_name(f"{folder.name}{RunFolder.REPLACED_MARK}{stamp}-{n}"), n + 1
    folder.rename(target)
    return target


def guard_folders(folders: Sequence[Path | None], configs: Sequence[RunConfig], *, replace: bool) -> list[str]:
    """Refuse (or with `replace`, move aside) every folder that holds a different run;
    returns one line per folder moved. Nothing is moved unless every conflict may be."""
    conflicts = [
        (folder, why)
        for folder, config in zip(folders, configs)
        if folder is not None and (why := folder_conflict(folder, config)) is not None
    ]
    if conflicts and not replace:
        folder, why = conflicts[0]
        more = f" ({len(conflicts) - 1} more job folder(s) likewise)" if len(conflicts) > 1 else ""
        raise UserError(
            f"{folder} already holds a different run{more}; {why}. Its results are kept and nothing was "
            f"written. Either run into a new folder (another hydra.run.dir=... or hydra.sweep.dir=...), or "
            f"add {REPLACE_FLAG} to move the old folder aside to {folder.name}{RunFolder.REPLACED_MARK}<time> (never "
            "deleted) and start afresh. Rerunning with the same config resumes instead."
        )
    return [f"moved {folder} aside to {move_aside(folder)} ({why})" for folder, why in conflicts]


def claim_job_folder(run_dir: Path, task_cfg: DictConfig, config: RunConfig) -> list[str]:
    """Inside a Hydra job, before anything is written into `run_dir`: refuse it if it holds
    a different run (or move it aside, when the command had --replace), then write the
    run's record into it as Hydra would have; returns one line per folder moved."""
    from hydra.core.hydra_config import HydraConfig

    moved = guard_folders([run_dir], [config], replace=os.environ.get(REPLACE_ENV) == "1")
    record = run_dir / RECORD_SUBDIR
    record.mkdir(parents=True, exist_ok=True)  # the job folder itself too, when it was moved aside
    # The whole composed config, Hydra's node at its `hydra` key (typed as HydraConf only).
    hydra_cfg: Any = HydraConfig.instance().cfg
    assert hydra_cfg is not None
    for name, node in (
        (RunFolder.CONFIG, task_cfg),
        (RunFolder.HYDRA_CONFIG, hydra_cfg),
        (RunFolder.OVERRIDES, hydra_cfg.hydra.overrides.task),
    ):
        (run_dir / name).write_text(OmegaConf.to_yaml(node), encoding="utf-8")
    return moved
