"""Pi's own failures are piexp's, never a policy's outcome: a Pi killed from outside, a
Pi whose endpoint never answers (killed at the wall-time limit), a policy that fails
answering; and a command of the model's outliving the limit is the model's outcome,
graded, never replayed unscored (a model's commands cannot reach Pi at all:
test_pi_sealed.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

from tests.harness.conftest import episode_settings, pi_settings, play_all, requires_pi

pytestmark = requires_pi


def _descendants_running_pi() -> list[int]:
    """Pids of this process's descendants whose command line is Pi's."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()
            if b"pi-coding-agent/dist/bundle/cli.js" not in cmdline:
                continue
            pid = int(entry)
            while pid > 1:  # walk up to this process
                stat = open(f"/proc/{pid}/stat").read()
                pid = int(stat.rsplit(")", 1)[1].split()[1])
                if pid == me:
                    found.append(int(entry))
                    break
        except (OSError, ValueError, IndexError):
            continue
    return found


def call(tool, **arguments):
    return {"tool_calls": [{"id": f"c{time.monotonic_ns()}", "type": "function",
                            "function": {"name": tool, "arguments": json.dumps(arguments)}}]}  # fmt: skip


def scripted(*steps):
    """A responder answering turn i with steps[i] (a message, or a callable giving one)."""

    async def respond(body):
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        step = steps[min(turn, len(steps) - 1)]
        return (await step()) if callable(step) else step

    return respond


def test_a_pi_killed_from_outside_is_an_infrastructure_failure(tasks):
    """SIGKILL to Pi while it waits for its second answer: no outcome, played again."""

    async def kill_pi():
        for pid in _descendants_running_pi():
            os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.5)
        return {"content": "The answer is 1"}

    responder = scripted(call("read", path="query.txt"), kill_pi)
    (record,) = play_all([lambda h: h.play_responder(responder, "killer", tasks[0], "python", episode_settings())])
    assert record.infrastructure_failure and record.error and "Pi exited" in record.error
    assert record.reward == 0.0 and record.stop_reason is None


def test_an_endpoint_that_never_answers_ends_at_the_wall_limit_as_infrastructure(tasks):
    async def hang():
        await asyncio.sleep(3600)

    started = time.monotonic()
    (record,) = play_all(
        [lambda h: h.play_responder(scripted(hang), "hang", tasks[0], "python", episode_settings())],
        pi_settings(wall_time_s=4),
    )
    assert time.monotonic() - started < 30
    assert record.infrastructure_failure and "wall_time_s=4" in str(record.error)


def test_a_failing_policy_is_recorded_as_an_error_not_scored(tasks):
    async def broken():
        raise RuntimeError("policy bug")

    (record,) = play_all(
        [lambda h: h.play_responder(scripted(broken), "broken", tasks[0], "python", episode_settings())]
    )
    assert record.error and "policy bug" in record.error
    assert not record.infrastructure_failure and record.stop_reason is None


def test_a_command_outliving_the_wall_limit_is_the_model_s_outcome(tasks):
    """`sleep 600` in Pi's shell (which has no time limit of its own): killed at the wall
    limit, graded with what was done before (the write), stop reason wall_time."""
    responder = scripted(call("write", path="solution.py", content="print(1)\n"), call("bash", command="sleep 600"))
    (record,) = play_all(
        [lambda h: h.play_responder(responder, "sleeper", tasks[0], "python", episode_settings())],
        pi_settings(wall_time_s=5),
    )
    assert not record.infrastructure_failure and record.error is None
    assert record.stop_reason == "wall_time"
    assert record.metrics["mutation_succeeded"] == 1.0 and record.metrics["execution_succeeded"] == 0.0


def test_the_turn_limit_stops_pi_and_the_episode_is_graded(tasks):
    """A policy that never stops calling tools: refused at limits.max_turns, graded."""
    responder = scripted(call("read", path="query.txt"))
    (record,) = play_all(
        [lambda h: h.play_responder(responder, "loop", tasks[0], "python", episode_settings(max_turns=3))]
    )
    assert record.error is None and not record.infrastructure_failure
    assert record.stop_reason == "max_turns" and record.turns == 3 and record.reward == 0.0


def test_an_endpoint_killed_mid_episode_is_an_infrastructure_failure(tasks, monkeypatch):
    """The endpoint's server is shut down while it answers Pi's second request (its
    socket gone with it): Pi gives up (after its own retries), and the episode is
    infrastructure, never scored. Pi's retries take about 15 s here."""
    import piexp.harness.pi.harness as pi_harness
    from piexp.harness.endpoint import EpisodeEndpoint

    started: list[EpisodeEndpoint] = []

    class Recorded(EpisodeEndpoint):
        async def start(self) -> None:
            started.append(self)
            await super().start()

    monkeypatch.setattr(pi_harness, "EpisodeEndpoint", Recorded)

    async def die():
        await started[0].close()  # cancels this very answer: Pi's connection drops
        return {"content": "never sent"}

    responder = scripted(call("read", path="query.txt"), die)
    (record,) = play_all([lambda h: h.play_responder(responder, "dies", tasks[0], "python", episode_settings())],
                         pi_settings(wall_time_s=60))  # fmt: skip
    assert record.infrastructure_failure, (record.error, record.stop_reason)
    assert record.reward == 0.0 and record.stop_reason is None


def test_a_model_service_gone_for_good_stops_the_run(tasks):
    """The model policy's service failure (piexp.policies.model.ModelServiceFailure, not
    an Exception) raised while answering Pi propagates out of the episode, so an eval
    stops, resumable, as it does in the reference environment."""
    import pytest

    from piexp.policies.model import ModelServiceFailure

    async def gone():
        raise ModelServiceFailure("the service is gone")

    with pytest.raises(ModelServiceFailure):
        play_all([lambda h: h.play_responder(scripted(gone), "gone", tasks[0], "python", episode_settings())])
