"""Resumable, observable sweeps.

Hydra's multirun can neither resume (Hydra issue 3328) nor show how a sweep is going
before it ends (issue 2284). piexp adds both around each job, independent of the
launcher (joblib on one machine, submitit on SLURM):

* `marker`: a job that finished writes `.piexp/complete.json` with a hash of its
  resolved config; the same job run again into the same folder is skipped.
* `status`: every job updates `sweep_status.json` / `sweep_status.md` in the sweep
  folder (job, state, key metric) and reports a failure on stderr when it happens.
* `tracking.run_tracked`: the wrapper `piexp.launch.job.run_job` calls.
"""

from piexp.sweeps.marker import MARKER_PATH, config_hash, read_marker, write_marker
from piexp.sweeps.status import STATUS_JSON, STATUS_MD, SweepStatus
from piexp.sweeps.tracking import FAIL_JOBS_ENV, JobInfo, SweepJobFailed, job_failed, run_tracked

__all__ = [
    "FAIL_JOBS_ENV",
    "MARKER_PATH",
    "STATUS_JSON",
    "STATUS_MD",
    "JobInfo",
    "SweepJobFailed",
    "SweepStatus",
    "config_hash",
    "job_failed",
    "read_marker",
    "run_tracked",
    "write_marker",
]
