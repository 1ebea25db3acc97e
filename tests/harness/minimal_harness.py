"""Test fixture: a third harness, the least a user's harness implements (`name` and
`play`, docs/harness.md's interface), playing each episode with the reference
environment's own code. Runs select it as a user selects theirs: a YAML file in a config
folder of their own naming this class with `_target_` (`--config-dir`)."""

from __future__ import annotations

from typing import Any

from piexp.harness.base import Harness
from piexp.policies.rollout import EpisodeRecord, run_episode

YAML = """\
_target_: tests.harness.minimal_harness.MinimalHarness
name: minimal
options: {}
"""


class MinimalHarness(Harness):
    """Only what the interface requires: every other member is `Harness`'s default."""

    name = "minimal"

    async def play(self, *episode: Any, **options: Any) -> EpisodeRecord:
        # The interface's arguments (policy, policy_name, task, language, settings,
        # sample=, record_transcript=) are `run_episode`'s: handed on as they come.
        return await run_episode(*episode, **options)
