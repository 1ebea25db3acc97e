"""Plain-text preview of tasks: the prompt the model would see, the files (truncated) and
the answer. Plain text (not rich markup) so it pipes, diffs and tests cleanly; the CLI may
print it through rich as-is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from piexp.tasks.core import Task

RULE = "=" * 72


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [{len(text) - limit} more characters, {len(text)} in all]"


def render_preview(
    tasks: Sequence[Task],
    prompt_fn: Callable[[Task], str],
    max_file_chars: int = 600,
) -> str:
    """One block per task: header, prompt, each file (sorted, truncated), answer.

    ``prompt_fn`` is injected (the env owns the prompt template), so the preview shows
    exactly what the model sees rather than a second copy of the template.
    """
    blocks = []
    for task in tasks:
        parts = [
            RULE,
            f"task {task.task_id}  family={task.family}  split={task.split}",
            f"digest {task.task_digest}",
            RULE,
            "--- prompt ---",
            # A task graded by its own verifier (an imported Harbor task) is asked its instruction.
            task.instruction if task.verifier is not None else prompt_fn(task),
        ]
        for name in sorted(task.files):
            content = task.files[name]
            parts.append(f"--- file {name} ({len(content)} chars) ---")
            parts.append(_truncate(content, max_file_chars).rstrip("\n"))
        if task.verifier is not None:
            where = task.verifier.describe()
            parts.append(f"--- graded by {where['folder']}/tests/test.sh, the workspace at {where['workdir']}")
        else:
            parts.append(f"--- answer: {task.answer}")
        blocks.append("\n".join(parts))
    return "\n\n".join(blocks) + "\n"
