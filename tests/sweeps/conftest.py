"""The reward sweep shared by the sweep, summary and reproduce tests (each sweep costs
about 25 s on two cores, so it runs once per session)."""

from __future__ import annotations

import pytest
from sweep_helpers import SMALL, SweepRuns, read_json, run_piexp


@pytest.fixture(scope="session")
def reward_sweep(tmp_path_factory: pytest.TempPathFactory) -> SweepRuns:
    """experiment=reward_sweep offline, 3 jobs at once; job 1 fails (injected, after its
    run and before its marker: what an interrupted job leaves), then the same command runs
    again on the same sweep folder."""
    work = tmp_path_factory.mktemp("sweep_cwd")
    sweep_dir = work / "multirun" / "rs"
    args = ["experiment=reward_sweep", *SMALL, "hydra.launcher.n_jobs=3", f"hydra.sweep.dir={sweep_dir}"]
    first = run_piexp(work, *args, env={"PIEXP_SWEEP_FAIL_JOBS": "1"})
    first_status = read_json(sweep_dir / "sweep_status.json") if (sweep_dir / "sweep_status.json").exists() else {}
    mtimes = {
        job: (sweep_dir / job / "results.json").stat().st_mtime_ns
        for job in ("0", "1", "2")
        if (sweep_dir / job / "results.json").exists()
    }
    second = run_piexp(work, *args)
    return SweepRuns(sweep_dir, first, first_status, mtimes, second)
