"""Generation is a pure function of (seed, split, family, index, params).

Golden digests pin the whole pipeline (RNG derivation, generators, canonical encoding):
if one changes, every recorded run's task set silently changes too, so a change here must
be deliberate (bump the stream key in piexp/tasks/core.py and update these values).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from piexp.tasks import FAMILIES, build_tasks
from piexp.tasks.core import compute_task_digest

GOLDEN_FIRST_TRAIN_DIGEST_SEED_0 = {
    "arith": "2c93815958259db3d1a9b58be87fd65504a30781dca59619d9759c76dd525de1",
    "csv_agg": "6a977433a059f9084466f87b6afa3e08c7c71b2bfc4175766e7ff392605d1bd8",
    "log_stats": "160eb987d9ff75c0dfeb1a982071c9bc2d01a2bc596217f6f0ce0b35f1d96388",
    "json_tree": "fee7c5773b20b816d87c6a39f35c32303896fa1e2f86272f3c499abca0f15568",
    "graph_paths": "ca004421a500c442ac5a82d9932a6c26fbe107646caa80e767b4170c31c95668",
    "grid_search": "a364963415761dbea0cf0d2bd15ea81a0039c77afdddbd460b3b39dbf189f53c",
    "number_theory": "0b097b2e336530a056104c39ca94a3e62fa568b18946db0524da30c5465d4a16",
    "dates": "cc2438bd5d561ab2770b90460d6ed4711d96c6b0a08b90a0af93b547d9c4cbb7",
}


def _digests(split: str, n: int, seed: int, families=None) -> list[str]:
    return [t.task_digest for t in build_tasks(split, n, seed, families or list(FAMILIES))]


def test_every_family_has_a_golden_digest() -> None:
    assert set(GOLDEN_FIRST_TRAIN_DIGEST_SEED_0) == set(FAMILIES)
    assert len(FAMILIES) >= 8 and "arith" in FAMILIES


def test_golden_digests() -> None:
    for family, digest in GOLDEN_FIRST_TRAIN_DIGEST_SEED_0.items():
        task = build_tasks("train", 1, 0, [family])[0]
        assert task.task_digest == digest, f"{family}: generation changed"


def test_same_seed_same_tasks() -> None:
    assert _digests("train", 3, 11) == _digests("train", 3, 11)
    assert _digests("eval", 3, 11) == _digests("eval", 3, 11)
    first = build_tasks("eval", 2, 5, ["arith"])
    second = build_tasks("eval", 2, 5, ["arith"])
    assert [t.to_dict() for t in first] == [t.to_dict() for t in second]


def test_different_seed_or_split_differs() -> None:
    assert set(_digests("train", 3, 1)).isdisjoint(_digests("train", 3, 2))
    assert set(_digests("train", 3, 1)).isdisjoint(_digests("eval", 3, 1))


def test_tasks_are_stable_under_more_tasks_or_families() -> None:
    """Task i of a family does not depend on how many tasks or which other families."""
    small = _digests("train", 2, 3, ["dates"])
    large = _digests("train", 5, 3, ["arith", "dates"])
    assert large[5:7] == small


def test_digest_is_independent_of_hash_seed_and_dict_order() -> None:
    code = (
        "import json; from piexp.tasks import build_tasks, FAMILIES;"
        "print(json.dumps([t.task_digest for t in build_tasks('train', 2, 4, sorted(FAMILIES))]))"
    )
    outputs = set()
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outputs.add(result.stdout.strip())
    assert len(outputs) == 1
    assert json.loads(outputs.pop()) == _digests("train", 2, 4, sorted(FAMILIES))
    files = {"b.txt": "2", "a.txt": "1"}
    reordered = {"a.txt": "1", "b.txt": "2"}
    assert compute_task_digest("f", "i", files, "3") == compute_task_digest("f", "i", reordered, "3")
