"""What a sweep's command does with its processes after Ctrl-C (piexp.launch.child_processes),
in a real process of its own with real children: one that ends within the grace time,
and a child with a grandchild that would not end; and the order of the kills, on a given
process tree."""

from __future__ import annotations

import json
import os
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


def test_a_parent_is_killed_before_the_processes_it_started(monkeypatch) -> None:
    """Top-down, whatever the pids: a parent killed after its child could see the child
    end and act on it first (a shell's `wait` returns and it exits 0, or starts another
    child) when the machine is busy between the two kills. The process tree is given
    (later pids above earlier ones, as after pid wrap-around) and the kills recorded, not
    sent."""
    from piexp.launch import child_processes

    me = os.getpid()
    tree = {900: me, 40: 900, 7: 40, 950: 900, 3: 950}  # pid -> parent
    monkeypatch.setattr(child_processes, "_parents", lambda: dict(tree))
    monkeypatch.setattr(child_processes, "_waited_for", lambda pid: True)
    sent: list[int] = []
    monkeypatch.setattr(child_processes.os, "kill", lambda pid, sig: sent.append(pid))
    assert child_processes.end_child_processes(grace_s=0) == [3, 7, 40, 900, 950]
    assert set(sent) == set(tree)
    for pid, parent in tree.items():
        if parent != me:
            assert sent.index(parent) < sent.index(pid), sent
