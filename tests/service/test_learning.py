"""The model gets better, and the proof can fail: bench/learning.py's whole run (the
pre-trained learner-local, RL with evaluations before and after on held-out tasks, and a
shuffled-reward control) at the bench's own scale. RL must raise held-out pass@1 and mean
shaped reward beyond the 95% intervals of their paired differences over tasks, and end
above the control beyond the interval of RL minus the control, paired over tasks.

The control's own change is printed, not asserted, in this one-seed test. Trained on
noise, the control's choice of program walks at random, and one run's interval over
tasks does not cover how far that walk spreads across runs: on one build
(4b46b0a4e8f9b7cb, commit 3b2b7c1, 2026-12-06) and one seed, the control's runs on two
2-core machines ended at pass@1 0.297 and 0.008 from a base of 0.102, while the RL runs
were the same to the printed digit (0.734). Whether the control stays inside its own
interval is a count over seeds (`python bench/learning.py --seeds=0,1,2,3,4`, which
reports it and exits non-zero when any run's control left it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from tests.service.conftest import load_bench

pytestmark = pytest.mark.slow


def test_rl_improves_held_out_pass_at_1_and_ends_above_the_shuffled_control(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Slow (tens of minutes): builds learner-local if this machine has no build of its
    sources, then runs bench/learning.py whole (the RL run and its shuffled-reward control)."""
    bench = load_bench("learning")
    # The build needs no server venv: on an empty cache it comes first, while another
    # worker of a parallel run creates the venv (this test is the suite's longest path).
    bench.build_model()
    request.getfixturevalue("server_venv")
    console = Console(record=True, width=160)
    figures = bench.learning(tmp_path, console)
    bench.report(figures, console)
    text = console.export_text()
    base, rl = figures["base"], figures["rl"]
    assert figures["tasks"] >= 32, text
    # The base model mostly writes a crashing program: room to improve, and signal.
    assert base["reward"] < 0.5, text
    assert figures["rl_improves"], f"RL did not raise held-out pass@1 beyond its interval\n{text}"
    assert figures["rl_improves_reward"] and rl["diff_reward"] > 0.1, text
    # The control, trained identically on shuffled rewards, ends below RL beyond the
    # interval of their paired difference: the reward, not training as such, made RL's gain.
    assert figures["rl_beats_control"], f"RL did not end above the shuffled-reward control beyond its interval\n{text}"
    # The per-step curve the bench prints (a collapse shows there: reward, files written
    # and turns falling) covers every training step of both runs.
    assert len(figures["rl_curve"]) == len(figures["control_curve"]) == 8, text
    # ... and what each step's episodes did.
    assert len(figures["rl_outcomes"]) == 8 and all(sum(step.values()) > 0 for step in figures["rl_outcomes"]), text
    # Every stage left its eval folder and the loop its comparison.
    assert (tmp_path / "rl" / "compare.md").is_file()
    assert (tmp_path / "control" / "eval_trained" / "results.json").is_file()
