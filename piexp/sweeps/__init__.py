"""Resumable, observable sweeps.

Hydra's multirun can neither resume (Hydra issue 3328) nor show how a sweep is going
before it ends (Hydra issue 2284). piexp adds both around each job, independent of the
launcher (joblib on one machine, submitit locally or on SLURM):

* `marker`: a job that finished writes `.piexp/complete.json` with a hash of its
  resolved config; the same job run again into the same folder is skipped.
* `status`: every job updates `sweep_status.json` / `sweep_status.md` in the sweep
  folder (job, state, key metric) and reports a failure on stderr when it happens.
* `liveness`: who runs a job (host, pid, heartbeat) and the judgement that shows a
  killed or silent job as `interrupted` or `stale`, never as `running`.
* `tracking.run_tracked`: the wrapper `piexp.launch.job.run_job` calls.
"""

from piexp.sweeps.liveness import HEARTBEAT_EVERY_S, STALE_AFTER_S, Owner, judge
from piexp.sweeps.marker import MARKER_PATH, config_hash, write_marker
from piexp.sweeps.status import STATUS_JSON, STATUS_MD, SweepStatus
from piexp.sweeps.tracking import FAIL_JOBS_ENV, STATUS_SUBDIR, JobInfo, SweepJobFailed, job_failed, run_tracked

__all__ = [
    "FAIL_JOBS_ENV",
    "HEARTBEAT_EVERY_S",
    "MARKER_PATH",
    "STALE_AFTER_S",
    "STATUS_JSON",
    "STATUS_MD",
    "STATUS_SUBDIR",
    "JobInfo",
    "Owner",
    "SweepJobFailed",
    "SweepStatus",
    "config_hash",
    "job_failed",
    "judge",
    "run_tracked",
    "write_marker",
]
