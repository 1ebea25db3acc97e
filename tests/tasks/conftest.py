"""Fixtures for the task tests: a runner that executes a reference program on a task.

References run in the real embedded sandbox (the same path the oracle policy and the
environment use), so a reference that only works outside isolation would fail here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pytest

from piexp.tasks import Task, reference_solution

SANDBOX_LANGUAGE = {"python": "python", "javascript": "nodejs", "julia": "julia"}


def last_line(stdout: str) -> str:
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    return lines[-1] if lines else ""


class ReferenceRunner:
    def __init__(self, url: str) -> None:
        self.url = url

    def run_many(self, tasks: Sequence[Task], language: str) -> list[tuple[Task, str, dict]]:
        """Run the family's reference on every task concurrently; (task, last line, response)."""
        from piexp.sandbox.client import close_sandbox_clients, sandbox_client

        async def one(task: Task):
            client = sandbox_client(self.url)
            _ok, response = await client.run(
                code=reference_solution(task.family, language),
                files=dict(task.files),
                timeout=20,
                language=SANDBOX_LANGUAGE[language],
            )
            stdout = (response.get("run_result") or {}).get("stdout", "")
            return task, last_line(str(stdout)), response

        async def main():
            try:
                return await asyncio.gather(*(one(task) for task in tasks))
            finally:
                await close_sandbox_clients()

        return asyncio.run(main())


@pytest.fixture(scope="session")
def reference_runner() -> Iterator[ReferenceRunner]:
    from piexp.sandbox.embedded import EmbeddedSandbox

    with EmbeddedSandbox() as sandbox:
        yield ReferenceRunner(sandbox.url)
