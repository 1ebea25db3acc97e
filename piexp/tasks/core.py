"""The task type, its canonical digest, and the deterministic RNG derivation.

Everything here is about *identity*: two tasks are the same task when their canonical
encodings agree, whatever process, platform or hash seed produced them. That is why the
digest is computed from a JSON encoding with sorted keys and sorted files (never from
``hash()`` or dict iteration order), and why each task's random stream is derived from a
SHA-256 of its coordinates (seed, split, family, index).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("train", "eval")

# Every answer (and every intermediate a natural solution computes) must be exactly
# representable as a JavaScript number, so that Python, JavaScript and Julia agree.
MAX_SAFE_INTEGER = 2**53


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, ASCII only.

    ``ensure_ascii`` makes the bytes independent of the platform's default encoding, and
    ``allow_nan=False`` refuses floats that have no canonical JSON form.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _freeze(value: Any) -> Any:
    """Make nested params immutable (mappings -> FrozenMap, lists -> tuples)."""
    if isinstance(value, Mapping):
        return FrozenMap({str(k): _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    """The JSON-able (plain dict/list) form of a frozen value."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


class FrozenMap(Mapping):
    """A read-only, hashable, picklable mapping.

    ``types.MappingProxyType`` would be read-only too, but it can be neither pickled (tasks
    travel to worker processes) nor hashed (a frozen dataclass hashes its fields).
    """

    __slots__ = ("_data", "_hash")
    _data: dict[str, Any]
    _hash: int | None  # computed on first use

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_data", dict(data or {}))
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenMap is immutable")

    def __hash__(self) -> int:
        cached = self._hash
        if cached is None:
            cached = hash(canonical_json(_thaw(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self._data) == dict(other)
        return NotImplemented

    def __reduce__(self):
        return (FrozenMap, (self._data,))

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def compute_task_digest(family: str, instruction: str, files: Mapping[str, str], answer: str) -> str:
    """SHA-256 over the canonical encoding of what the model sees plus the answer.

    The task id, split and params are deliberately left out: the digest says "this is the
    same problem", so that a train and an eval task with different ids but identical
    content are still caught as an overlap.
    """
    payload = {
        "family": family,
        "instruction": instruction,
        "files": [[name, files[name]] for name in sorted(files)],
        "answer": answer,
    }
    return sha256_hex(canonical_json(payload))


def compute_files_digest(files: Mapping[str, str]) -> str:
    """SHA-256 of the input files alone (names and contents), for the same-inputs check."""
    return sha256_hex(canonical_json([[name, files[name]] for name in sorted(files)]))


@dataclass(frozen=True)
class Task:
    """One workspace: input files, an instruction and the integer answer.

    ``task_digest`` (and ``files_digest``) are derived in ``__post_init__`` rather than
    passed in, so a task can never carry a digest that disagrees with its content.

    A task graded by a verifier of its own (an imported Harbor task, piexp.harbor) has
    no answer (``answer=""``) and a ``verifier`` whose ``digest`` (Harbor's content
    digest of its whole folder: instruction, environment, solution and tests) is both of
    its digests: two such tasks are the same task exactly when their folders are.
    """

    task_id: str
    family: str
    split: str
    instruction: str
    files: Mapping[str, str]
    answer: str
    params: Mapping[str, Any] = field(default_factory=FrozenMap)
    # What grades the task when not its answer (piexp.harbor.task_folder.HarborVerifier).
    verifier: Any = field(default=None, repr=False)
    task_digest: str = field(init=False, default="")
    files_digest: str = field(init=False, default="", repr=False)
    # Canonical (family, params) key for the repeated-params check; derived once here so
    # the overlap check is a plain dict lookup per task.
    params_key: str = field(init=False, default="", repr=False)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.verifier is not None:
            self._init_verified()
            return
        try:
            value = int(self.answer)
        except (TypeError, ValueError):
            raise ValueError(f"answer must be a decimal integer string, got {self.answer!r}") from None
        if str(value) != self.answer:
            raise ValueError(f"answer must be canonical decimal, got {self.answer!r}")
        files = FrozenMap({str(k): str(v) for k, v in self.files.items()})
        object.__setattr__(self, "files", files)
        object.__setattr__(self, "params", _freeze(dict(self.params)))
        object.__setattr__(
            self,
            "task_digest",
            compute_task_digest(self.family, self.instruction, files, self.answer),
        )
        object.__setattr__(self, "files_digest", compute_files_digest(files))
        object.__setattr__(self, "params_key", canonical_json([self.family, _thaw(self.params)]))

    def _init_verified(self) -> None:
        if self.answer != "":
            raise ValueError(f"a task graded by its verifier has no answer, got {self.answer!r}")
        digest = str(self.verifier.digest).removeprefix("sha256:")
        object.__setattr__(self, "files", FrozenMap({str(k): str(v) for k, v in self.files.items()}))
        object.__setattr__(self, "params", _freeze(dict(self.params)))
        object.__setattr__(self, "task_digest", digest)
        object.__setattr__(self, "files_digest", digest)
        object.__setattr__(self, "params_key", canonical_json([self.family, _thaw(self.params)]))

    def __hash__(self) -> int:
        return hash((self.task_id, self.task_digest))

    def to_dict(self, include_files: bool = True) -> dict[str, Any]:
        """JSON-able form (for manifests and previews)."""
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "family": self.family,
            "split": self.split,
            "instruction": self.instruction,
            "answer": self.answer,
            "params": _thaw(self.params),
            "task_digest": self.task_digest,
        }
        if self.verifier is not None:
            out["verifier"] = self.verifier.describe()
        if include_files:
            out["files"] = dict(self.files)
        return out


def derive_rng(seed: int, split: str, family: str, index: int) -> tuple[random.Random, str]:
    """The task's private random stream, and its key (hex) for the params record.

    The split name is part of the key, so train and eval never share a stream whatever the
    seeds; SHA-256 (not ``hash()``) keeps it identical across processes and platforms.
    """
    key = canonical_json(["piexp.tasks.v1", int(seed), split, family, int(index)])
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    stream = int.from_bytes(digest[:16], "big")
    return random.Random(stream), digest[:8].hex()
