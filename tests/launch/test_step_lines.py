"""A training run's console shows one line a step, not tinker-cookbook's table of every
metric (about 80 rows a step); the table goes whole into job.log. Through the cookbook's
own loggers: its JSON logger writes the step's row, then its pretty-printer logs the table."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from rich.console import Console
from tinker_cookbook.utils import ml_log

from piexp.console import attach_job_log, detach_job_log
from piexp.launch.step_lines import COOKBOOK_TABLE_LOGGER, show_steps_as_lines, step_line


@pytest.mark.parametrize("terminal", [False, True], ids=["log", "terminal"])
def test_a_step_table_becomes_one_line_and_goes_whole_into_job_log(tmp_path: Path, capsys, terminal: bool) -> None:
    """In a log as in a terminal, where the cookbook's rich console styles the table
    (its title "Step N" italic: an ANSI code before it) and its config dump: one line a
    step on the console, the table and the config dump in job.log, without ANSI codes."""
    metrics = {
        "env/all/reward/total": 0.25,
        "env/all/total_episodes": 32,
        "test/env/all/passed": 0.5,
        "test/env/all/total_episodes": 8,
        "time/total": 12.4,
        **{f"time/part_{i}": float(i) for i in range(60)},
    }
    cookbook = logging.getLogger(COOKBOOK_TABLE_LOGGER)
    level = cookbook.level
    cookbook.setLevel(logging.INFO)  # as the cookbook's setup_logging leaves it in a run
    attach_job_log(tmp_path / "job.log")
    lines = show_steps_as_lines(tmp_path)
    try:
        pretty = ml_log.PrettyPrintLogger()
        pretty.console = Console(force_terminal=terminal)
        logger = ml_log.MultiplexLogger([ml_log.JsonLogger(str(tmp_path)), pretty])
        logger.log_hparams({"learning_rate": 0.001, "max_steps": 2})
        logger.log_metrics(metrics, step=3)
    finally:
        cookbook.removeFilter(lines)
        cookbook.setLevel(level)
        detach_job_log()
    shown = capsys.readouterr().err
    assert "step 3, reward 0.2500 over 32 episodes, eval pass@1 0.500 ± 0." in shown
    assert "(8 episodes), 12 s" in shown
    assert "time/part_59" not in shown and "Metric" not in shown
    assert "Configuration" not in shown and "learning_rate" not in shown
    log = (tmp_path / "job.log").read_text()
    assert "time/part_59" in log and "Step 3" in log and "learning_rate: 0.001" in log
    assert "\x1b" not in log


def test_a_step_without_a_periodic_eval_says_no_pass_rate() -> None:
    assert step_line({"step": 1, "env/all/reward/total": -0.1}) == "step 1, reward -0.1000"
