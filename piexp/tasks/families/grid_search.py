"""grid_search: breadth-first search on a walled grid from a start to several targets.

Needs a program: a 20x30 maze-like grid with ~30% walls; distances must follow the walls
and some targets may be sealed off (they are skipped). The answer is computed here by
relaxation sweeps, independently of the references' breadth-first search.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact


@dataclass(frozen=True)
class GridSearchParams:
    rows: int = 20  # lines in grid.txt
    cols: int = 30  # characters per line
    wall_percent: int = 30  # chance (in percent) that a cell is a wall
    n_targets: int = 6  # number of `*` target cells

    def check(self) -> str | None:
        if self.n_targets + 1 > self.rows * self.cols:
            return "n_targets + 1 must fit in rows * cols cells"
        return None


def _step_counts(grid: list[str], start: tuple[int, int]) -> dict[tuple[int, int], int]:
    """Fewest steps from ``start`` to every reachable cell, by relaxation sweeps to a fixed point.

    Each sweep lowers every open cell to one more than its best neighbour, alternating
    row-major and reverse order, until a sweep changes nothing. A different method from the
    references' breadth-first search, so that a bug in either shows up as a mismatch.
    """
    cells = [(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch != "#"]
    index = {cell: i for i, cell in enumerate(cells)}
    neighbours = [[index[n] for n in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)) if n in index] for r, c in cells]
    unreached = len(cells)  # more steps than any path between open cells can take
    steps = [unreached] * len(cells)
    steps[index[start]] = 0
    order = list(range(len(cells)))
    changed = True
    while changed:
        changed = False
        for i in order:
            best = min([steps[j] for j in neighbours[i]], default=unreached) + 1
            if best < steps[i]:
                steps[i] = best
                changed = True
        order.reverse()
    return {cell: n for cell, n in zip(cells, steps) if n < unreached}


def generate(rng: random.Random, p: GridSearchParams):
    for _attempt in range(100):
        cells = [["#" if rng.random() * 100 < p.wall_percent else "." for _ in range(p.cols)] for _ in range(p.rows)]
        spots = rng.sample([(r, c) for r in range(p.rows) for c in range(p.cols)], p.n_targets + 1)
        start, targets = spots[0], spots[1:]
        cells[start[0]][start[1]] = "S"
        for r, c in targets:
            cells[r][c] = "*"
        grid = ["".join(row) for row in cells]
        dist = _step_counts(grid, start)
        reached = [dist[t] for t in targets if t in dist]
        if reached or _attempt == 99:
            break  # at least one reachable target makes the task non-trivial
    answer = sum(reached)
    check_exact("grid_search", answer)
    instruction = (
        "`grid.txt` is a rectangular grid: `#` is a wall, `.` is open floor, `S` is the start "
        "and each `*` is a target (targets and the start are open cells). One step moves to "
        "the cell directly above, below, left or right, never through a wall and never off "
        "the grid.\n"
        "The answer is the sum, over every target that can be reached from S, of the fewest "
        "steps from S to it. Targets that cannot be reached are skipped. Print the answer as "
        "a decimal integer."
    )
    return instruction, {"grid.txt": "\n".join(grid) + "\n"}, answer, {}


FAMILY = Family(
    name="grid_search",
    summary="walled grid: sum of BFS distances from S to every reachable target",
    params_type=GridSearchParams,
    limits={"rows": (1, 60), "cols": (2, 100), "wall_percent": (0, 80), "n_targets": (1, 40)},
    # Larger is harder in each; level 3 is the defaults (`tasks family=grid_search --params`).
    difficulty=Difficulty(
        harder={"rows": 1, "cols": 1, "n_targets": 1},
        levels=(
            {"rows": 5, "cols": 8, "n_targets": 2},
            {"rows": 10, "cols": 15, "n_targets": 4},
            {"rows": 20, "cols": 30, "n_targets": 6},
            {"rows": 40, "cols": 60, "n_targets": 12},
            {"rows": 60, "cols": 100, "n_targets": 24},
        ),
    ),
    generate=generate,
)
