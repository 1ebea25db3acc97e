"""`python -m piexp status DIR [--watch [SECONDS]]`: the status table of a sweep folder
(`sweep_status.json`) or of a single run folder (`.piexp/sweep_status.json`), with every
`running` job judged by its owner and heartbeat (`piexp.sweeps.liveness`), so a killed
or silent job shows as `interrupted` or `stale`. The judged table is also written back
to the folder's `sweep_status.md`/`.json` (when writable): after a crash that left no
job alive to correct it, this is what makes the files true again.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from piexp.errors import UserError
from piexp.sweeps import STATUS_JSON, STATUS_SUBDIR, SweepStatus

# The screen is cleared and redrawn each refresh (ANSI: clear, cursor home).
_CLEAR = "\033[2J\033[H"


def find_status(target: Path) -> SweepStatus:
    """The status table of a sweep folder or a single run folder."""
    if not target.is_dir():
        raise UserError(
            f"Cannot show the status of {target}: it is not a folder. Give a sweep folder "
            "(hydra.sweep.dir) or a run folder."
        )
    for folder in (target, target / STATUS_SUBDIR):
        if (folder / STATUS_JSON).is_file():
            return SweepStatus(folder)
    raise UserError(
        f"Cannot show the status of {target}: it holds neither {STATUS_JSON} (a sweep folder) "
        f"nor {STATUS_SUBDIR / STATUS_JSON} (a run folder); it is not a piexp run, or its first "
        "job has not started yet."
    )


def render(status: SweepStatus) -> str:
    return SweepStatus.markdown(status.refresh())


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="piexp status",
        description="Status of every job of a sweep folder (or of one run folder); running jobs are "
        "judged by process and heartbeat, so a dead one shows as interrupted or stale.",
    )
    parser.add_argument("dir", type=Path, help="a sweep folder (hydra.sweep.dir) or a run folder")
    parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=5.0,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 5) until Ctrl-C",
    )
    args = parser.parse_args(list(argv))
    if args.watch is not None and args.watch <= 0:
        raise UserError(f"--watch needs a positive number of seconds, not {args.watch:g}.")
    status = find_status(args.dir)
    if args.watch is None:
        print(render(status), end="")
        return 0
    try:
        while True:
            print(_CLEAR + render(status), end="", flush=True)
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0
