"""What a sweep's command does with its processes after Ctrl-C (piexp.launch.child_processes),
in a real process of its own with real children: one that ends within the grace time,
and a child with a grandchild that would not end."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def run_parent(body: str) -> dict:
    script = textwrap.dedent(
        """
        import json, subprocess, sys, time
        from piexp.launch.child_processes import descendants, end_child_processes
        """
    ) + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_children_that_end_in_time_are_waited_for_and_none_is_killed() -> None:
    outcome = run_parent(
        """
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
        started = time.monotonic()
        killed = end_child_processes(grace_s=20)
        print(json.dumps({"killed": killed, "waited": time.monotonic() - started, "code": child.wait(5)}))
        """
    )
    assert outcome["killed"] == [] and outcome["code"] == 0
    assert 0.3 < outcome["waited"] < 15


def test_a_child_and_its_grandchild_left_past_the_grace_time_are_killed() -> None:
    outcome = run_parent(
        """
        child = subprocess.Popen(["bash", "-c", "sleep 300 & wait"])
        deadline = time.monotonic() + 10
        while not descendants(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = sorted(descendants(child.pid))
        killed = end_child_processes(grace_s=0.5)
        print(json.dumps({"killed": killed, "expected": sorted([child.pid, *grandchild]), "code": child.wait(5)}))
        """
    )
    assert len(outcome["expected"]) == 2
    assert outcome["killed"] == outcome["expected"]
    assert outcome["code"] == -9
