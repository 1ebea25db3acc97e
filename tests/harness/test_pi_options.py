"""`harness=pi` options that cannot work, a runtime Pi's sandbox lacks, an unknown harness
and a misspelt or misplaced harness option: each is one paragraph naming the fix, exit 2,
before a run folder exists (never four retried infrastructure failures and exit 4). The
minimums the refusals name are those under which the real Pi plays an episode."""

from __future__ import annotations

import shutil

import pytest

from piexp.errors import UserError
from piexp.harness.pi.harness import PiHarness
from piexp.harness.pi.options import MEMORY_SHARE, MINIMUM_OPTIONS, PI_EPISODE_MB, available_memory_mb
from piexp.tasks import build_tasks
from tests.harness.conftest import episode_settings, pi_settings, play_all, requires_pi
from tests.harness.test_pi_rewards import _play
from tests.harness.test_pi_runs import piexp


def _refused(tmp_path, *overrides: str) -> str:
    run_dir = tmp_path / "run"
    done = piexp("mode=check", "family=arith", "lang=python", *overrides, f"hydra.run.dir={run_dir}", timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not run_dir.exists()
    return " ".join(done.stderr.split())  # the paragraph is wrapped to the terminal's width


@requires_pi
@pytest.mark.parametrize(
    ("option", "value", "fix"),
    [
        ("memory_mb", "1", f"harness.options.memory_mb={MINIMUM_OPTIONS['memory_mb'][0]} or more"),
        ("max_processes", "1", "harness.options.max_processes=32 or more"),
        ("wall_time_s", "1", "harness.options.wall_time_s=3 or more"),
    ],
)
def test_an_option_pi_cannot_start_under_is_refused_naming_the_least_that_works(tmp_path, option, value, fix):
    said = _refused(tmp_path, "harness=pi", f"harness.options.{option}={value}")
    assert f"harness.options.{option}={value} is too little" in said and fix in said


@requires_pi
def test_pi_plays_an_episode_at_every_minimum_the_refusals_name():
    """The oracle's arith episode in Python passes with each option at its minimum, one
    process per episode and in a warm slot (whose Pi is recycled at the memory cap): the
    refusals never refuse a value that works. The 3 s wall limit holds with a core to
    spare (a one-process episode takes about 1 s); a suite loading every core can stretch
    one past it, so an episode stopped by the wall limit alone is played again, up to
    three times: whether Pi itself overran (infrastructure) or the oracle's program was
    still running when the limit struck (graded, `stop_reason` "wall_time")."""
    task = build_tasks("train", 1, 0, ["arith"])[0]
    least = {key: value for key, (value, _unit) in MINIMUM_OPTIONS.items()}
    for way in ({"warm": False}, {"warm": True, "slot_rss_mb": least["memory_mb"]}):
        for _try in range(3):
            [record] = play_all(
                [_play("oracle", task, "python", episode_settings(), [task])], pi_settings(**least, **way)
            )
            overran = "did not finish within harness.options.wall_time_s" in str(record.error)
            if not overran and record.stop_reason != "wall_time":
                break
        assert record.reward == 1.0 and not record.infrastructure_failure, (way, record.error, record.stop_reason)


@requires_pi
@pytest.mark.skipif(shutil.which("julia") is not None, reason="julia is installed here")
def test_a_language_whose_runtime_is_missing_is_refused_before_the_preflight(tmp_path):
    said = _refused(tmp_path, "harness=pi", "lang=julia")
    assert "`julia` is not installed here" in said and "drop julia from lang" in said


def test_an_unknown_harness_lists_the_harnesses(tmp_path):
    said = _refused(tmp_path, "harness=codex")
    assert "Unknown harness option codex" in said and "Valid harness options: builtin, pi" in said


def test_a_misspelt_harness_option_suggests_the_nearest(tmp_path):
    said = _refused(tmp_path, "harness=pi", "harness.options.wall_tme_s=30")
    assert "Did you mean harness.options.wall_time_s" in said
    said = _refused(tmp_path, "harness=pi", "+harness.options.wall_tme_s=30")
    assert "Did you mean wall_time_s?" in said


def test_an_option_of_another_harness_names_the_harness_it_belongs_to(tmp_path):
    said = _refused(tmp_path, "harness=builtin", "harness.options.wall_time_s=10")
    assert "it is a harness=pi option" in said and "Add harness=pi" in said


def test_a_warm_slot_counts_at_its_recycling_size_in_the_concurrency_refusal():
    """A warm slot's Pi keeps memory from one session to the next until it is replaced
    past `slot_rss_mb`, so the refusal of `mode.max_concurrency` counts each slot at that
    size, not at a one-process episode's: a concurrency a one-process run may hold is
    refused for slots that may each grow to 2 GB before their replacement."""
    available = available_memory_mb()
    if available is None:
        pytest.skip("/proc/meminfo has no MemAvailable here")
    big = 2048
    concurrency = int(MEMORY_SHARE * available // big) + 1  # past what slots of 2 GB fit
    assert concurrency * PI_EPISODE_MB < MEMORY_SHARE * available / 2  # far within one-process episodes
    PiHarness.refuse_concurrency(pi_settings(warm=False), concurrency)
    PiHarness.refuse_concurrency(pi_settings(warm=True), concurrency)  # the default recycling size fits
    with pytest.raises(UserError) as refused:
        PiHarness.refuse_concurrency(pi_settings(warm=True, slot_rss_mb=big, memory_mb=big), concurrency)
    said = " ".join(str(refused.value).split())
    assert (
        f"harness.options.slot_rss_mb={big}" in said
        and f"Set mode.max_concurrency={max(1, concurrency - 1)} or less" in said
    )
