"""The Hydra job: validate the composed config, then run the selected mode in the
Hydra run folder. Failures a user can cause end the job with one paragraph.

Every job goes through `piexp.sweeps.run_tracked`, which skips a job already completed
with the same config in the same folder (resumable sweeps), keeps the sweep's status
file current, and in a multirun turns a failure into a recorded, reported job failure
instead of an exit that would take the other parallel jobs down with it."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from piexp.config.compose import validate
from piexp.config.paths import config_dir
from piexp.config.presets import register_presets
from piexp.console import attach_job_log
from piexp.errors import UserError, report_user_error
from piexp.launch.run import run_mode
from piexp.sweeps import JobInfo, job_failed, run_tracked


def run_job(cfg: DictConfig) -> float | None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    job = JobInfo.from_hydra()
    attach_job_log(run_dir / "job.log")  # what the console shows, as plain text, in the run folder
    try:
        config = validate(cfg)
        return run_tracked(config, run_dir, job, run_mode)
    except UserError as error:
        if job.multirun:  # a sweep job's validation error: record it, keep the others going
            raise job_failed(job, run_dir, error) from None
        report_user_error(error)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        if job.multirun:
            raise
        # Ctrl-C: the servers and sandboxes were stopped on the way out; one line, no
        # traceback, and how to go on (train resumes from its checkpoints, eval from its
        # finished episodes, in the same folder).
        print(f"piexp: interrupted; nothing is left running. Resume with the same command and "
              f"hydra.run.dir={run_dir}", file=sys.stderr)  # fmt: skip
        sys.exit(130)


def hydra_entry() -> None:
    register_presets()
    main = hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(run_job)
    main()
