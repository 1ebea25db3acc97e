"""`python -m piexp compare RUN [RUN ...] [--out DIR]`: eval runs side by side.

For each family x language cell and overall: pass@k (k up to the smallest sample count
of the runs) and mean shaped reward of every run, and each later run's difference from
the first with a 95% confidence interval computed over tasks: the per-task differences
(a task's pass@1 is its share of correct samples) are paired, and the interval is
mean +- t(0.975, n-1) x sd / sqrt(n) (a paired t-interval; n = tasks in the cell).
Writes `compare.md`, `compare.json` and `compare.png` (pass@1 and reward per cell, with
the interval of each run's mean over tasks) into `--out` (default: a new folder
`comparisons/DATE/TIME`, as runs go to `outputs/DATE/TIME`; never the current folder,
where they would mix with whatever is there).

Runs must have evaluated the same tasks: each run's `episodes.jsonl` records every
task's content digest; a task missing from a run or generated differently is refused,
naming the first such task, since a comparison on different tasks means nothing.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import argparse
import sys
import time
from pathlib import Path

from piexp.launch.comparison import CompareError, write_comparison


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m piexp compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="eval run folders; the first is the baseline")
    parser.add_argument(
        "--out", type=Path, default=None, help="where compare.md/.json/.png go (default: comparisons/DATE/TIME)"
    )
    parser.add_argument(
        "--wandb-project", default=None, help="also log the comparison to this Weights & Biases project"
    )
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        raise CompareError("compare needs at least two eval run folders (the first is the baseline)")
    if args.wandb_project:
        from piexp.launch.result_logging import offline_note, wandb_credentials, wandb_installed

        if not wandb_installed():
            raise CompareError("--wandb-project needs the wandb package, which is not installed (pip install wandb)")
        local_mode = wandb_credentials(f"--wandb-project {args.wandb_project}")
        if local_mode:
            print(f"piexp: {offline_note(local_mode)}", file=sys.stderr)
    out = args.out if args.out is not None else new_comparison_folder()
    print(write_comparison(args.runs, out))
    print(f"wrote {out / RunFolder.COMPARE_MD}, {RunFolder.COMPARE_JSON}, {RunFolder.COMPARE_PNG}")
    if args.wandb_project:
        import json

        from piexp.launch.result_logging import compare_tables, log_result

        metrics, tables = compare_tables(json.loads((out / RunFolder.COMPARE_JSON).read_text(encoding="utf-8")))
        files = [out / RunFolder.COMPARE_MD, out / RunFolder.COMPARE_JSON, out / RunFolder.COMPARE_PNG]
        runs = {"runs": [str(run) for run in args.runs], "harnesses": json.loads(
            (out / RunFolder.COMPARE_JSON).read_text(encoding="utf-8")).get("harnesses")}  # fmt: skip
        log_result(out, args.wandb_project, out.name, runs, metrics, tables, files, "compare")
    return 0


def new_comparison_folder(root: Path = Path("comparisons")) -> Path:
    """`root/DATE/TIME`, with a suffix when a comparison already took that second."""
    base = root / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S")
    folder, n = base, 1
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    return folder
