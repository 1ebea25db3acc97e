"""Warm slots (`harness.options.warm`, piexp/harness/pi/slot.py) play exactly the episodes
one Pi process per episode plays: the same scripted episodes, played both ways, give the
same requests (system prompt, tools, messages, so the same tool results), the same Pi
events (but for times and ids) and the same records. The warm episodes play one after
another in one slot, so every episode after the first follows a reset (32 Pi episodes,
one at a time: about 65 s on the 2-core machine, most of it the one-process half)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import piexp.harness.pi.harness as pi_harness
from piexp.env.episode import get_run_renderer
from piexp.policies import make_policy
from piexp.tasks import FAMILIES, build_tasks
from tests.harness.conftest import MODEL, episode_settings, pi_settings, play_all, requires_pi
from tests.harness.test_pi_faults import call, scripted

pytestmark = requires_pi

POLICIES = ("oracle", "guess", "crash", "wrong", "edit")
LANGUAGES = ("python", "javascript")
# Times, durations and response ids differ between any two plays of an episode.
_VOLATILE = {"timestamp", "durationMs", "responseId", "wall_time_seconds"}


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def stable_events(stdout: bytes) -> list[dict[str, Any]]:
    """Pi's events, times and ids aside. Left out: the session file's header, which
    `--print` writes first and RPC mode (one process, many sessions) never does; a
    command's partial output (`tool_execution_update`: cut wherever the pipe's reads
    fall; the end event has it whole); and the usage of a streaming partial message,
    which Pi serializes while the stream fills it (both differ between two plays in the
    same mode)."""
    events = []
    for line in stdout.decode().splitlines():
        event = json.loads(line)
        if event.get("type") in ("session", "tool_execution_update"):
            continue
        if event.get("type") == "message_update":
            event.pop("usage", None)
            event.get("message", {}).pop("usage", None)
            event.get("assistantMessageEvent", {}).get("partial", {}).pop("usage", None)
        events.append(_stable(event))
    return _calls_in_order(events)


_PHASE = {"tool_execution_start": 0, "tool_execution_end": 1}


def _calls_in_order(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pi runs one message's tool calls at once: their start, update and end events
    interleave in whatever order the calls finish (in either mode). Each run of them is
    put in call order."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for event in [*events, {}]:
        if event.get("type") in _PHASE:
            run.append(event)
            continue
        out += sorted(run, key=lambda e: (str(e.get("toolCallId")), _PHASE[e["type"]]))
        run = []
        if event:
            out.append(event)
    return out


def jobs() -> list[tuple[str, Any, str]]:
    """Every family in both languages, the policies in turn (an odd count of them, so
    each policy plays in both languages)."""
    tasks = build_tasks("eval", 1, 0, list(FAMILIES))
    combos = [(task, lang) for task in tasks for lang in LANGUAGES]
    return [(POLICIES[i % len(POLICIES)], task, lang) for i, (task, lang) in enumerate(combos)]


def play_sequentially(warm: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, list, bytes]]:
    """(record, requests, events) of each job, played one after another in one harness."""
    outputs: list[bytes] = []
    parse = pi_harness.parse_events

    def keep(stdout: bytes):
        outputs.append(stdout)
        return parse(stdout)

    monkeypatch.setattr(pi_harness, "parse_events", keep)
    renderer = get_run_renderer(*MODEL)
    settings = episode_settings()
    played: list[tuple[Any, list]] = []

    async def all_of(harness):
        for policy_name, task, language in jobs():
            policy = make_policy(policy_name, renderer, [task])
            answer = harness.responder(policy, settings)
            requests: list[dict] = []

            async def recording(body, answer=answer, requests=requests):
                requests.append(body)
                return await answer(body)

            record = await harness.play_responder(recording, policy_name, task, language, settings)
            played.append((record, requests))
        return played

    play_all([all_of], pi_settings(warm=warm))
    monkeypatch.setattr(pi_harness, "parse_events", parse)
    assert len(outputs) == len(played)
    return [(record, requests, out) for (record, requests), out in zip(played, outputs)]


def test_warm_slots_play_the_episodes_one_pi_per_episode_plays(monkeypatch):
    cold = play_sequentially(False, monkeypatch)
    warm = play_sequentially(True, monkeypatch)
    for (policy_name, task, language), (c_record, c_requests, c_out), (w_record, w_requests, w_out) in zip(
        jobs(), cold, warm
    ):
        where = f"{policy_name} x {task.family} x {language}"
        assert c_record.error is None and w_record.error is None, (where, c_record.error, w_record.error)
        assert w_requests == c_requests, where
        assert stable_events(w_out) == stable_events(c_out), where
        for field in ("reward", "shaped", "metrics", "stop_reason", "turns", "tool_calls", "answer", "failures"):
            assert getattr(w_record, field) == getattr(c_record, field), (where, field)
        assert w_record.last_run == c_record.last_run, where
        assert _stable({**w_record.transcript, "wall_s": 0}) == _stable({**c_record.transcript, "wall_s": 0}), where
    assert {r.reward for r, _, _ in warm} == {0.0, 1.0}


def test_the_model_s_commands_get_the_same_limits_warm(tasks):
    """Pi's shell hands its limits to the model's commands: in a warm slot they are the
    one-process episode's (`ulimit -a`: CPU time, file size, open files, ...), though
    Pi itself lives on (a slot is recycled before Pi's own CPU reaches its limit)."""
    seen: dict[bool, str] = {}
    for warm in (False, True):

        async def limits(harness, warm=warm):
            responder = scripted(call("bash", command="ulimit -a"), {"content": "0"})
            record = await harness.play_responder(responder, "limits", tasks[0], "python", episode_settings())
            seen[warm] = record.last_run["stdout"]

        play_all([limits], pi_settings(warm=warm))
    assert seen[True] == seen[False] and "cpu time" in seen[True]
