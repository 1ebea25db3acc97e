"""The run viewer in a real headless Chromium (Debian's package; scripts/setup.sh installs
it): the page loads without a console error, filters change the visible rows, an episode
opens, two runs compare side by side, and a 2,000-episode run writes in seconds and stays
usable. Screenshots are written next to each viewer for a person to look at."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from headless_chromium import Chromium, chromium_path

from piexp.config.compose import load
from piexp.launch import evaluate
from piexp.env.splits import build_splits
from piexp.transcripts.store import EVAL_TRANSCRIPTS, TRAIN_TRANSCRIPTS, TranscriptWriter, read_transcripts
from piexp.transcripts.viewer import VIEWER_FILE, write_run_viewer
from tests.job_launcher import run_piexp

pytestmark = pytest.mark.skipif(
    chromium_path() is None, reason="chromium is not installed (scripts/setup.sh installs Debian's package)"
)

BASE = [
    "mode=eval",
    "family=[arith,dates]",
    "lang=[python,javascript]",
    "tasks.train_per_family=1",
    "tasks.eval_per_family=2",
]
VISIBLE_ROWS = "document.querySelectorAll('#episodes tbody tr').length"


def set_select(select_id: str, value: str) -> str:
    return (
        f"(() => {{ const s = document.getElementById('{select_id}'); s.value = '{value}'; "
        "s.dispatchEvent(new Event('change')); return s.value; })()"
    )


def eval_run(sandbox_url: str, folder: Path, policy: str) -> Path:
    config = load([*BASE, f"policy={policy}"])
    evaluate.run_eval(config, folder, sandbox_url, build_splits(config))
    return folder


def test_viewer_in_chromium(sandbox_url, tmp_path):
    wrong = eval_run(sandbox_url, tmp_path / "wrong", "wrong")
    oracle = eval_run(sandbox_url, tmp_path / "oracle", "oracle")
    compared = tmp_path / "compare.html"
    result = run_piexp("show", str(wrong), "--html", str(compared), "--against", str(oracle), timeout=120)
    assert result.returncode == 0, result.stderr
    train = tmp_path / "train"  # what a train run leaves: cookbook metrics and per-iteration pages
    (train / "iteration_000000").mkdir(parents=True)
    (train / "iteration_000000" / "train.html").write_text("<html><body>iteration 0</body></html>")
    (train / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": step, "env/all/reward/total": 0.1 * step}) + "\n" for step in range(5))
    )
    # Its episodes: the oracle eval's transcripts as two training steps' (a fixture standing in
    # for a training run's, which carry their step as `iteration`).
    with TranscriptWriter(train / TRAIN_TRANSCRIPTS) as writer:
        for number, transcript in enumerate(read_transcripts(oracle / EVAL_TRANSCRIPTS)):
            writer.write({**transcript, "iteration": number % 2, "group": 0, "sample": number})
    assert write_run_viewer(train) == train / VIEWER_FILE
    page_text = (wrong / VIEWER_FILE).read_text()
    assert "http://" not in page_text.replace("http://www.w3.org/2000/svg", "")  # nothing to fetch

    async def drive() -> None:
        async with Chromium() as page:
            await page.open((wrong / VIEWER_FILE).as_uri())
            assert await page.evaluate(VISIBLE_ROWS) == 8
            assert await page.evaluate("document.getElementById('f-step-label').hidden") is True  # no steps in an eval
            assert await page.evaluate(set_select("f-language", "python")) == "python"
            assert await page.evaluate(VISIBLE_ROWS) == 4
            await page.evaluate(set_select("f-family", "dates"))
            assert await page.evaluate(VISIBLE_ROWS) == 2
            assert "2 of 8 episodes shown" in await page.evaluate("document.getElementById('counts').textContent")
            await page.evaluate("document.querySelector('#episodes tbody tr').click()")
            assert await page.evaluate("document.getElementById('detail-section').hidden") is False
            detail = await page.evaluate("document.getElementById('detail').innerText")
            assert "call write" in detail and "solution.py" in detail and "stdout" in detail
            assert "(expected " in detail  # a failed episode's stated answer beside the task's
            assert await page.evaluate("document.querySelectorAll('#detail .kw').length") > 0  # highlighted code
            await page.screenshot(wrong / "viewer.png")

            await page.open(compared.as_uri())
            assert await page.evaluate(VISIBLE_ROWS) == 8
            await page.evaluate(
                "(() => { const c = document.getElementById('f-differ'); c.checked = true; "
                "c.dispatchEvent(new Event('change')); })()"
            )
            assert await page.evaluate(VISIBLE_ROWS) == 8  # wrong fails where the oracle passes
            await page.evaluate("document.querySelector('#episodes tbody tr').click()")
            assert await page.evaluate("document.querySelectorAll('#detail > div').length") == 2
            sides = await page.evaluate("[...document.querySelectorAll('#detail > div')].map(d => d.innerText)")
            assert "wrong" in sides[0] and "oracle" in sides[1]
            await page.screenshot(tmp_path / "compare.png")

            await page.open((train / VIEWER_FILE).as_uri())
            assert await page.evaluate("document.getElementById('train').hidden") is False
            points = await page.evaluate("document.querySelector('#reward-curve polyline').getAttribute('points')")
            assert len(points.split()) == 5
            assert (
                await page.evaluate("document.querySelector('#pages a').getAttribute('href')")
                == "iteration_000000/train.html"
            )
            # A training run's episodes by step: the filter offers its steps, the rows and the
            # opened episode say theirs.
            assert await page.evaluate(VISIBLE_ROWS) == 8
            steps = await page.evaluate("[...document.querySelectorAll('#f-step option')].map(o => o.value)")
            assert steps == ["", "0", "1"]
            assert await page.evaluate(set_select("f-step", "1")) == "1"
            assert await page.evaluate(VISIBLE_ROWS) == 4
            await page.evaluate("document.querySelector('#episodes tbody tr').click()")
            assert "train · step 1 · " in await page.evaluate("document.getElementById('detail').innerText")
            await page.screenshot(train / "viewer.png")
            assert page.errors == [], page.errors

    asyncio.run(drive())
    assert (wrong / "viewer.png").read_bytes()[:4] == b"\x89PNG"
    print(f"screenshots: {wrong / 'viewer.png'}, {tmp_path / 'compare.png'}")


def test_a_passing_check_counts_expectations_met(tmp_path):
    """The viewer of a passing `mode=check` counts expectations met, not binary reward
    (the crash and wrong checks pass by earning nothing and must not show as failures)."""
    run = tmp_path / "check"
    result = run_piexp("mode=check", "family=arith", "lang=python", f"hydra.run.dir={run}", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    episodes = json.loads((run / "check.json").read_text())["episodes"]
    sampled = sum(episode["policy"] in ("crash", "wrong", "guess") for episode in episodes)
    assert sampled and all(episode["expectation_violation"] is None for episode in episodes)

    async def drive() -> None:
        async with Chromium() as page:
            await page.open((run / VIEWER_FILE).as_uri())
            counts = await page.evaluate("document.getElementById('counts').textContent")
            assert f"check: {len(episodes)} met expectations, 0 did not" in counts, counts
            assert "failed" not in counts
            cells = await page.evaluate("[...document.querySelectorAll('#grids td.cell')].map(c => c.textContent)")
            assert cells == [f"{len(episodes)}/{len(episodes)}"]
            grid = await page.evaluate("document.getElementById('grids').innerText")
            assert "met expectations / episodes" in grid
            await page.evaluate(set_select("f-policy", "wrong"))
            await page.evaluate("document.querySelector('#episodes tbody tr').click()")
            detail = await page.evaluate("document.getElementById('detail').innerText")
            assert "check expectation of wrong: met" in detail and "(expected " in detail
            assert page.errors == [], page.errors

    asyncio.run(drive())


def test_a_2000_episode_viewer_writes_in_seconds_and_stays_usable(sandbox_url, tmp_path):
    source = eval_run(sandbox_url, tmp_path / "source", "wrong")
    records = [json.loads(line) for line in (source / "episodes.jsonl").read_text().splitlines()]
    transcripts = {(t["task_id"], t["language"]): t for t in read_transcripts(source / EVAL_TRANSCRIPTS)}
    big = tmp_path / "big"
    big.mkdir()
    with (big / "episodes.jsonl").open("w") as sink, TranscriptWriter(big / EVAL_TRANSCRIPTS) as writer:
        for sample in range(250):  # 8 episodes x 250 samples
            for record in records:
                writer.write({**transcripts[(record["task_id"], record["language"])], "sample": sample})
                sink.write(json.dumps({**record, "sample": sample}) + "\n")
    start = time.perf_counter()
    write_run_viewer(big)
    written_s = time.perf_counter() - start
    assert written_s < 10, f"writing the viewer of 2,000 episodes took {written_s:.1f} s"

    async def drive() -> None:
        async with Chromium() as page:
            start = time.perf_counter()
            await page.open((big / VIEWER_FILE).as_uri())
            loaded_s = time.perf_counter() - start
            assert "2000 of 2000 episodes shown" in await page.evaluate("document.getElementById('counts').textContent")
            assert await page.evaluate(VISIBLE_ROWS) == 300  # listed a page at a time
            await page.evaluate("document.getElementById('more').click()")
            assert await page.evaluate(VISIBLE_ROWS) == 600
            await page.evaluate("document.querySelectorAll('#episodes tbody tr')[555].click()")
            assert "call write" in await page.evaluate("document.getElementById('detail').innerText")
            assert page.errors == [], page.errors
            assert loaded_s < 15, f"the 2,000-episode page took {loaded_s:.1f} s to load"
            print(
                f"2,000 episodes: viewer written in {written_s:.2f} s "
                f"({(big / VIEWER_FILE).stat().st_size / 1e6:.1f} MB), loaded in {loaded_s:.2f} s"
            )

    asyncio.run(drive())
