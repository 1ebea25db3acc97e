"""The encode memo of the tokenizer proxy: a bounded, thread-safe LRU of ``encode``
results keyed by the exact text (``EncodeCache``), and the per-thread budget under
which ``encode`` answers from the memo and refuses to tokenize much new text
(``EncodeBudget``, ``MemoMiss``)."""

from __future__ import annotations

import array
import threading
from collections import OrderedDict
from typing import Any


class EncodeCache:
    """A bounded, thread-safe LRU of ``encode`` results keyed by the exact text.

    Why: tinker-cookbook's renderers re-render the whole conversation before every
    sampling call (``EnvFromMessageEnv`` calls ``build_generation_prompt`` on the full
    history each turn), so every earlier message, and the tool-laden system prompt
    shared by all episodes, is tokenized again turn after turn.  That was most of an
    episode's time outside the sandbox.  A ``str`` is immutable and encoding it is a
    pure function of the text and the tokenizer, so a remembered result is exact.

    Bounded both by entry count and by the total characters of the cached texts (one
    huge tool result cannot pin memory); texts longer than ``max_text_chars`` are not
    cached.  Ids are stored compactly (``array('i')``, 4 bytes a token) and every hit
    returns a fresh ``list``, so callers may mutate what they get.  ``clear()`` is
    called when the tokenizer's vocabulary or settings may have changed.
    """

    def __init__(self, max_entries: int = 8192, max_chars: int = 8_000_000, max_text_chars: int = 262_144):
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.max_text_chars = min(max_text_chars, max_chars)
        self._entries: OrderedDict[tuple[Any, str], array.array] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def chars(self) -> int:
        """Total characters of the cached texts."""
        return self._chars

    def get(self, text: str, options: Any = None) -> list[int] | None:
        """The cached ids of ``text`` encoded with ``options`` (a hashable summary of
        the keyword arguments), as a new list; ``None`` on a miss."""
        key = (options, text)
        with self._lock:
            ids = self._entries.get(key)
            if ids is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
        return ids.tolist()

    def put(self, text: str, options: Any, ids: list[int]) -> None:
        if len(text) > self.max_text_chars or self.max_entries <= 0:
            return
        try:
            packed = array.array("i", ids)
        except (TypeError, OverflowError):  # not plain ints: do not cache
            return
        key = (options, text)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= len(text)
            self._entries[key] = packed
            self._chars += len(text)
            while self._entries and (len(self._entries) > self.max_entries or self._chars > self.max_chars):
                (_, evicted), _ = self._entries.popitem(last=False)
                self._chars -= len(evicted)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0


class MemoMiss(LookupError):
    """``encode`` inside :meth:`ThreadSafeTokenizer.encode_budget` needed to tokenize
    more new text than the budget allows (or was called in a form never memoised)."""


class EncodeBudget:
    """Context manager from :meth:`ThreadSafeTokenizer.encode_budget`: while it is
    entered, ``encode`` in this thread answers from the memo, tokenizes new texts while
    their total length stays within ``remaining`` characters, and raises
    :class:`MemoMiss` beyond that. ``missed`` tells afterwards whether any call was
    refused (even one whose ``MemoMiss`` a caller swallowed), so a result computed
    inside is to be trusted only if it is False."""

    __slots__ = ("_local", "_previous", "missed", "remaining")

    def __init__(self, local: threading.local, chars: int) -> None:
        self._local = local
        self._previous: EncodeBudget | None = None
        self.remaining = chars
        self.missed = False

    def refuse(self, why: str) -> MemoMiss:
        self.missed = True
        return MemoMiss(why)

    def __enter__(self) -> EncodeBudget:
        self._previous = getattr(self._local, "budget", None)
        self._local.budget = self
        return self

    def __exit__(self, *exc: object) -> None:
        self._local.budget = self._previous
