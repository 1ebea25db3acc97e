"""Every family's reference programs print exactly the generator's answer.

Python and JavaScript run in the embedded sandbox on 20 tasks per family (10 train and
10 eval, so both streams are covered); Julia runs only where `julia` is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

import pytest

from piexp.tasks import FAMILIES, build_tasks, reference_solution


def _tasks(family: str, per_split: int = 10, seed: int = 7):
    return build_tasks("train", per_split, seed, [family]) + build_tasks("eval", per_split, seed, [family])


@pytest.mark.parametrize("language", ["python", "javascript"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reference_prints_answer(reference_runner, family: str, language: str) -> None:
    tasks = _tasks(family)
    assert len(tasks) >= 20
    failures = []
    for task, line, response in reference_runner.run_many(tasks, language):
        if line != task.answer:
            run = response.get("run_result") or {}
            failures.append(
                f"{task.task_id}: printed {line!r}, expected {task.answer!r}; "
                f"status={response.get('status')} stderr={str(run.get('stderr', ''))[-300:]!r}"
            )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("language", ["python", "javascript", "julia"])
def test_reference_embeds_no_answer(family: str, language: str) -> None:
    """References compute; they never carry an answer (no long integer literals at all)."""
    source = reference_solution(family, language)
    assert not re.search(r"\d{6,}", source), "reference contains a long literal"
    for task in _tasks(family, per_split=3):
        if len(task.answer.lstrip("-")) >= 3:
            assert task.answer not in source


@pytest.mark.needs_julia
@pytest.mark.skipif(shutil.which("julia") is None, reason="julia is not on PATH on this machine")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_julia_reference_prints_answer(family: str) -> None:
    julia = shutil.which("julia")
    for task in _tasks(family, per_split=3):
        with tempfile.TemporaryDirectory() as workdir:
            for name, content in task.files.items():
                with open(os.path.join(workdir, name), "w", encoding="utf-8") as handle:
                    handle.write(content)
            with open(os.path.join(workdir, "solution.jl"), "w", encoding="utf-8") as handle:
                handle.write(reference_solution(family, "julia"))
            result = subprocess.run(
                [julia, "--startup-file=no", "solution.jl"],
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=300,
            )
            lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
            assert result.returncode == 0, result.stderr[-1000:]
            assert lines and lines[-1] == task.answer, (task.task_id, lines[-1:], result.stderr[-500:])
