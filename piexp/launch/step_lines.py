"""What a training run shows per step on its console: one line (the step, the batch's mean
reward over its episodes, the periodic eval's pass@1 with its interval when the step ran
one, the step's time) instead of tinker-cookbook's table of every metric, about 80 rows a
step, which scrolls everything else away in a log or a terminal. The table still goes whole
into the run's job.log, and metrics.jsonl holds every value."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from piexp.run_folder import RunFolder
from piexp.console import ProgressReport, plain, say, to_job_log
from piexp.run_records import EVAL_EPISODES_KEY, TRAIN_KEYS, finite_number
from piexp.stats import share_ci95

# tinker-cookbook's PrettyPrintLogger logs each step's table through this logger, as one
# record whose text starts with the table's centred title, and its config dump
# ("Configuration:" and a line per field) likewise; on a terminal both are rich's
# captured output, with ANSI styles ("\x1b[3m Step 0 \x1b[0m": the title is italic).
COOKBOOK_TABLE_LOGGER = "tinker_cookbook.utils.ml_log"
_STEP_TABLE = re.compile(r"\A\s*Step (\d+)\s*\n")
_CONFIG_DUMP = re.compile(r"\A\s*Configuration:\s*\n")


def step_line(row: dict[str, Any]) -> str:
    """One step's metrics.jsonl row as a line."""
    parts = [f"step {row.get('step', '?')}"]
    reward = finite_number(row.get(TRAIN_KEYS["reward"][0]))
    episodes = finite_number(row.get("env/all/total_episodes"))
    if reward is not None:
        parts.append(f"reward {reward:.4f}" + (f" over {int(episodes)} episodes" if episodes is not None else ""))
    passed = finite_number(row.get(TRAIN_KEYS["pass@1"][0]))
    evaluated = finite_number(row.get(EVAL_EPISODES_KEY))
    if passed is not None:
        half = share_ci95(passed, int(evaluated)) if evaluated is not None else None
        parts.append(
            f"eval pass@1 {passed:.3f}"
            + (f" ± {half:.3f}" if half is not None else "")
            + (f" ({int(evaluated)} episodes)" if evaluated is not None else "")
        )
    seconds = finite_number(row.get("time/total"))
    if seconds is not None:
        parts.append(f"{seconds:.0f} s")
    return ", ".join(parts)


class StepLines(logging.Filter):
    """On the cookbook's logger: a step's metric table becomes `step_line` of the row the
    cookbook has just written to metrics.jsonl (it writes the row before the table); the
    table's text goes into job.log only."""

    def __init__(self, run_dir: Path, progress: ProgressReport | None = None) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        text = plain(record.getMessage())
        if _CONFIG_DUMP.match(text):
            to_job_log(text, markup=False)  # rl_train_config.json holds the same, as JSON
            return False
        match = _STEP_TABLE.match(text)
        if match is None:
            return True
        to_job_log(text, markup=False)
        step = int(match.group(1))
        rows = [row for row in RunFolder(self.run_dir).metrics() if row.get("step") == step]
        say(step_line(rows[-1]) if rows else f"step {step} (metrics.jsonl has no row for it yet)")
        if self.progress is not None:
            self.progress.reach(step + 1, note=f"step {step} done")
        return False


def show_steps_as_lines(run_dir: Path, progress: ProgressReport | None = None) -> StepLines:
    """Install `StepLines` for a run (moving `progress` on at each step); remove it with
    `logging.getLogger(COOKBOOK_TABLE_LOGGER).removeFilter`."""
    lines = StepLines(run_dir, progress)
    logging.getLogger(COOKBOOK_TABLE_LOGGER).addFilter(lines)
    return lines
