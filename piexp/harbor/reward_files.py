"""A Harbor verifier's reward, read as Harbor 0.25.0 reads it (`harbor.verifier.verifier`):
`/logs/verifier/reward.json` when it exists, else `/logs/verifier/reward.txt`.

- reward.json: a JSON object of finite numbers (an empty file, text that is not JSON, a
  value that is not a number, NaN or an infinity is an error); piexp's reward is its
  `reward` entry, or its only entry when it has one;
- reward.txt: one finite number (surrounding whitespace allowed);
- neither file: an error, not a 0.

An error here means the verifier did not grade the episode: piexp's harness records it as
an infrastructure failure (played again, never scored), never as the model's 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

REWARD_JSON = "reward.json"
REWARD_TXT = "reward.txt"
# Names a verifier may have meant (a common misspelling), mentioned when neither file is there.
MISSPELLINGS = ("rewards.json", "rewards.txt", "reward.JSON")


@dataclass(frozen=True)
class RewardRead:
    reward: float | None  # None: no reward (`problem` says why)
    rewards: dict[str, float] = field(default_factory=dict)
    problem: str | None = None
    source: str = ""  # the file it came from


def read_reward(files: dict[str, bytes | None]) -> RewardRead:
    """The reward from the verifier's log folder's files (name -> bytes, None when absent)."""
    data = files.get(REWARD_JSON)
    if data is not None:
        return _from_json(data)
    data = files.get(REWARD_TXT)
    if data is not None:
        return _from_text(data)
    wrong = [name for name in MISSPELLINGS if files.get(name) is not None]
    hint = f" (it wrote {', '.join(wrong)}; Harbor reads {REWARD_JSON} or {REWARD_TXT})" if wrong else ""
    return RewardRead(None, problem=f"the verifier wrote no reward file{hint}")


def _from_json(data: bytes) -> RewardRead:
    where = f"/logs/verifier/{REWARD_JSON}"
    if not data.strip():
        return RewardRead(None, problem=f"{where} is empty", source=REWARD_JSON)
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return RewardRead(None, problem=f"{where} is not JSON: {data[:80]!r}", source=REWARD_JSON)
    if not isinstance(value, dict):
        return RewardRead(None, problem=f"{where} is not a JSON object of rewards: {data[:80]!r}", source=REWARD_JSON)
    rewards: dict[str, float] = {}
    for key, item in value.items():
        if not isinstance(item, (int, float)):  # true and false are numbers to Harbor (as to Python)
            return RewardRead(None, problem=f"{where} has the non-numeric reward {key}={item!r}", source=REWARD_JSON)
        if not math.isfinite(item):
            return RewardRead(None, problem=f"{where} has the non-finite reward {key}={item!r}", source=REWARD_JSON)
        rewards[str(key)] = float(item)
    if "reward" in rewards:
        reward = rewards["reward"]
    elif len(rewards) == 1:
        reward = next(iter(rewards.values()))
    else:
        return RewardRead(
            None, rewards, problem=f"{where} has {len(rewards)} rewards and none named `reward`", source=REWARD_JSON
        )
    return RewardRead(reward, rewards, source=REWARD_JSON)


def _from_text(data: bytes) -> RewardRead:
    where = f"/logs/verifier/{REWARD_TXT}"
    try:
        value = float(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return RewardRead(None, problem=f"{where} is not a number: {data[:80]!r}", source=REWARD_TXT)
    if not math.isfinite(value):
        return RewardRead(None, problem=f"{where} is not a finite number: {data[:80]!r}", source=REWARD_TXT)
    return RewardRead(value, {"reward": value}, source=REWARD_TXT)
