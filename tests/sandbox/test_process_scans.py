"""The sandbox tests' process scans count only this test session's processes: another
session's sandboxes on the same machine (a second checkout's tests, another user's)
once made `assert_clean` fail here (issue 15, observation 9)."""

from __future__ import annotations

import subprocess
import sys
import time


def _all_pids(pattern: str) -> list[str]:
    """Every process on the machine matching `pattern` (pgrep, unfiltered)."""
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()


def test_a_process_scan_sees_this_sessions_processes_and_not_another_sessions(pids_with, marker):
    ours = subprocess.Popen(["/bin/sh", "-c", f"sleep 30; : {marker}-ours"])
    # Another session: a parent whose command line names pytest, with a child bearing the marker.
    theirs = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess; subprocess.run(['/bin/sh', '-c', 'sleep 30; : {marker}-theirs'])",
            "pytest-of-another-session",
        ],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not (pids_with(f"{marker}-ours") and len(_all_pids(f"{marker}-theirs")) >= 2):  # parent and child
            assert time.monotonic() < deadline, "the processes did not start"
            time.sleep(0.05)
        assert pids_with(f"{marker}-ours") == [ours.pid]
        assert pids_with(f"{marker}-theirs") == [] and _all_pids(f"{marker}-theirs")  # there, but not ours
    finally:
        ours.kill()
        ours.wait()
        subprocess.run(["pkill", "-f", f"{marker}-theirs"], check=False)
        theirs.kill()
        theirs.wait()
