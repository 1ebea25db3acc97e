"""The Hydra job: validate the composed config, check that the Hydra run folder holds no
other run (only then is anything written into it: the `.hydra/` record, `job.log`), then
run the selected mode there. Failures a user can cause end the job with one paragraph.

Every job goes through `piexp.sweeps.run_tracked`, which skips a job already completed
with the same config in the same folder (resumable sweeps), keeps the sweep's status
file current, and in a multirun turns a failure into a recorded, reported job failure
instead of an exit that would take the other parallel jobs down with it."""

from __future__ import annotations

from piexp.run_folder import RunFolder

import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from piexp.config.compose import validate
from piexp.config.paths import config_dir
from piexp.config.presets import register_presets
from piexp.console import (
    attach_job_log,
    detach_job_log,
    outlive_closed_streams,
    quiet_third_party_deprecations,
    third_party_warnings_to_job_log,
    set_job_label,
)
from piexp.errors import UserError, deliver_interrupts_quietly, report_user_error
from piexp.harness.base import refuse_unusable_harness
from piexp.launch.base_model import refuse_checkpoint_of_another_base_model
from piexp.launch.ray_rollouts import close_rollouts, open_rollouts
from piexp.launch.run import run_mode
from piexp.launch.folder_guard import claim_job_folder
from piexp.quick_exit import freeze_the_heap_at_exit
from piexp.sweeps import JobInfo, job_failed, run_tracked


#: The pid of the process that started the sweep (set by `piexp.commands.run`): a job in
#: another process runs in a parallel sweep's worker.
SWEEP_PROCESS_ENV = "PIEXP_SWEEP_PROCESS"


def run_job(cfg: DictConfig) -> float | None:
    deliver_interrupts_quietly()  # a parallel sweep's worker too
    freeze_the_heap_at_exit()  # likewise
    outlive_closed_streams()  # likewise: a closed console never ends a job
    quiet_third_party_deprecations()  # likewise (a sweep's job process starts here)
    third_party_warnings_to_job_log()  # likewise
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    job = JobInfo.from_hydra()
    try:
        config = validate(cfg)
        refuse_checkpoint_of_another_base_model(config)
        refuse_unusable_harness(config)  # e.g. before `make setup`
        # rollouts=ray: the cluster joined (or started) and its nodes checked, before
        # anything is written.
        open_rollouts(config, run_dir)
        # Nothing is written into the folder before this: it may hold another run.
        for line in claim_job_folder(run_dir, cfg, config):
            print(f"piexp: {line}", file=sys.stderr)
        attach_job_log(run_dir / RunFolder.JOB_LOG)  # what the console shows, as plain text, in the run folder
        set_job_label(f"job {job.num}" if job.multirun else None)
        return run_tracked(config, run_dir, job, run_mode)
    except UserError as error:
        if job.multirun:  # a sweep job's validation error: record it, keep the others going
            raise job_failed(job, run_dir, error) from None
        report_user_error(error)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        if job.multirun and os.environ.get(SWEEP_PROCESS_ENV, str(os.getpid())) != str(os.getpid()):
            # A job of a parallel sweep has stopped its sandbox and recorded itself
            # interrupted; its pool worker ends now rather than wait, idle, for work from
            # a sweep that is over.
            detach_job_log()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        if job.multirun:  # a sequential sweep's job, in the sweep's own process
            raise
        # Ctrl-C: the servers and sandboxes were stopped on the way out; one line, no
        # traceback, and how to go on (train resumes from its checkpoints, eval from its
        # finished episodes, in the same folder).
        print(f"piexp: interrupted; nothing is left running. Resume with the same command and "
              f"hydra.run.dir={run_dir}", file=sys.stderr)  # fmt: skip
        sys.exit(130)
    finally:
        close_rollouts()
        detach_job_log()  # the next job of this process (a sequential sweep) logs into its own folder
        set_job_label(None)


def hydra_entry() -> None:
    register_presets()
    main = hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(run_job)
    main()
