"""Train/eval overlap: the report that goes into the run's manifest, and the refusal.

Three kinds of overlap are looked for, each with a dict lookup per eval task so the check
is linear in the number of tasks (bench/tasks.py measures this):

* the same task digest (same family, instruction, files and answer);
* the same input files (an eval task whose workspace equals a train task's, even if the
  question about it differs: the model would have seen those inputs in training);
* the same (family, params) -- params include the task's stream key, so a repeat means
  the two tasks were drawn from the same generator stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from piexp.errors import UserError
from piexp.tasks.core import Task

_KINDS = ("digest", "files", "params")


@dataclass
class OverlapReport:
    train_count: int
    eval_count: int
    # Each entry: {"train_task_id", "eval_task_id", "key"}; key is the shared digest/params.
    digest_overlaps: list[dict[str, str]] = field(default_factory=list)
    files_overlaps: list[dict[str, str]] = field(default_factory=list)
    params_overlaps: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.digest_overlaps or self.files_overlaps or self.params_overlaps)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form for the manifest (counts first, then the offending pairs)."""
        out = asdict(self)
        out["ok"] = self.ok
        out["counts"] = {
            "train": self.train_count,
            "eval": self.eval_count,
            "digest_overlaps": len(self.digest_overlaps),
            "files_overlaps": len(self.files_overlaps),
            "params_overlaps": len(self.params_overlaps),
        }
        return out

    def describe(self, limit: int = 10) -> str:
        lines = []
        for kind, entries in zip(_KINDS, (self.digest_overlaps, self.files_overlaps, self.params_overlaps)):
            for entry in entries[:limit]:
                lines.append(
                    f"  same {kind}: eval task {entry['eval_task_id']} repeats train task {entry['train_task_id']}"
                )
            if len(entries) > limit:
                lines.append(f"  ... and {len(entries) - limit} more with the same {kind}")
        return "\n".join(lines)

    def raise_if_overlap(self) -> None:
        """Refuse the splits with an error naming the offending tasks."""
        if not self.ok:
            raise UserError(
                "train and eval task splits overlap; refusing to run (use another seed, "
                "or different family params for eval):\n" + self.describe()
            )


def check_split_overlap(train: Sequence[Task], eval: Sequence[Task]) -> OverlapReport:  # noqa: A002
    """Compare every eval task against the train split (O(len(train) + len(eval)))."""
    by_digest: dict[str, str] = {}
    by_files: dict[str, str] = {}
    by_params: dict[str, str] = {}
    for task in train:
        by_digest.setdefault(task.task_digest, task.task_id)
        by_files.setdefault(task.files_digest, task.task_id)
        by_params.setdefault(task.params_key, task.task_id)
    report = OverlapReport(train_count=len(train), eval_count=len(eval))
    for task in eval:
        if task.task_digest in by_digest:
            report.digest_overlaps.append(
                {"train_task_id": by_digest[task.task_digest], "eval_task_id": task.task_id, "key": task.task_digest}
            )
        if task.files_digest in by_files:
            report.files_overlaps.append(
                {"train_task_id": by_files[task.files_digest], "eval_task_id": task.task_id, "key": task.files_digest}
            )
        if task.params_key in by_params:
            report.params_overlaps.append(
                {"train_task_id": by_params[task.params_key], "eval_task_id": task.task_id, "key": task.params_key}
            )
    return report


def assert_no_overlap(train: Sequence[Task], eval: Sequence[Task]) -> OverlapReport:  # noqa: A002
    """check_split_overlap, raising UserError (naming the tasks) on any overlap."""
    report = check_split_overlap(train, eval)
    report.raise_if_overlap()
    return report
