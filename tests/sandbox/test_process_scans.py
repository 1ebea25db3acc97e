"""The sandbox tests' process scans count only this pytest session's processes, since
another pytest session's sandboxes on the same machine (a second checkout's tests,
another user's) would make `assert_clean` fail here; and `assert_clean` counts only the
programs of the server under test, since the sandboxed programs (`_sandbox_main`) of
piexp runs beside the suite would otherwise fail the sandbox tests of a `make test`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from piexp.sandbox import EmbeddedSandbox


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


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_assert_clean_leaves_another_runs_sandboxed_program_alone(
    work_dir_factory, sandbox_handle_cls, marker, pids_with
):
    """Another piexp run's server (here a second one of this pytest session, which the
    session-wide scan counts as this pytest session's) runs a program while the server under test is checked."""
    other_program = f"import subprocess; subprocess.run(['/bin/sh', '-c', 'sleep 20; : {marker}'])"
    my_dir, their_dir = work_dir_factory("mine"), work_dir_factory("theirs")
    with (
        EmbeddedSandbox(work_dir=my_dir, launcher="bwrap") as mine,
        EmbeddedSandbox(work_dir=their_dir, launcher="bwrap") as theirs,
    ):
        handle, other = sandbox_handle_cls(mine, my_dir), sandbox_handle_cls(theirs, their_dir)
        running = threading.Thread(target=lambda: other.run(other_program, run_timeout=30), daemon=True)
        running.start()
        try:
            deadline = time.monotonic() + 20
            while not (pids_with(marker) and pids_with("_sandbox_main")):
                assert time.monotonic() < deadline, "the other run's program did not start"
                time.sleep(0.05)
            assert handle.run("print(6 * 7)")["run_result"]["stdout"] == "42\n"
            handle.assert_clean(marker)  # the other run's program is still running: not a leftover
            assert pids_with(marker), "the other run's program ran through the check"
            with pytest.raises(AssertionError, match="leftover processes"):
                other.assert_clean(marker)  # its own server does count it
        finally:
            for pid in pids_with(marker):  # the other run's program, by its ids
                os.kill(pid, signal.SIGKILL)
            running.join(timeout=30)
            handle.http.close()
            other.http.close()
