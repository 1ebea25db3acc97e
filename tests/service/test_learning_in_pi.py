"""The model gets better inside the real Pi, and the proof can fail: bench/learning.py
--harness=pi whole (the pre-trained learner-local-pi, RL in Pi with evaluations in Pi
before and after on held-out tasks, and a shuffled-reward control in Pi), one seed. RL
must raise held-out pass@1 in Pi beyond the 95% interval of its paired difference over
tasks, and end above the shuffled-reward control beyond the interval of their paired
difference (the control's own change is printed, not asserted, in one seed: see
tests/service/test_learning.py).

Opt-in (`PIEXP_LEARNING_IN_PI=1`), and not part of `make test`: on a 2-core machine
the learner-local-pi build takes 16-30 minutes on an empty cache (2,200 scripted
episodes, half through Pi, and 1,200 fit steps; 16 on an AMD EPYC, 30 on a Xeon with
other work beside it) and the runs 16-20 more, about 2,800 s of CPU added to a suite of
35-43 minutes that should get shorter, not longer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from tests.service.conftest import load_bench

from tests.harness.conftest import requires_pi

pytestmark = [
    pytest.mark.slow,
    requires_pi,
    pytest.mark.skipif(
        os.environ.get("PIEXP_LEARNING_IN_PI") != "1",
        reason="opt-in (PIEXP_LEARNING_IN_PI=1): the learner-local-pi build and its runs take 32-50 minutes "
        "on 2 cores, on top of the suite's own",
    ),
]


def test_rl_in_pi_improves_held_out_pass_at_1_in_pi_and_ends_above_the_shuffled_control(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Slow (32-50 minutes on 2 cores from an empty cache, 16-20 with the build
    cached): builds learner-local-pi, then runs bench/learning.py --harness=pi whole."""
    bench = load_bench("learning")
    bench.build_model("learner-local-pi")
    request.getfixturevalue("server_venv")
    console = Console(record=True, width=160)
    figures = bench.learning(tmp_path, console, harness="pi")
    bench.report(figures, console)
    text = console.export_text()
    assert figures["tasks"] >= 32, text
    # The base model acts in Pi (it calls tools) and passes some tasks: room to improve.
    assert 0 < figures["base"]["pass@1"] < 0.5, text
    assert figures["rl_improves"], f"RL in Pi did not raise held-out pass@1 in Pi beyond its interval\n{text}"
    assert figures["rl_beats_control"], (
        f"RL in Pi did not end above the shuffled-reward control beyond its interval\n{text}"
    )
    # What each step's episodes did, from Pi's training transcripts.
    assert len(figures["rl_outcomes"]) == 8 and all(sum(step.values()) > 0 for step in figures["rl_outcomes"]), text
    assert (tmp_path / "rl" / "compare.md").is_file()
