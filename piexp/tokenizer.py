"""Offline Qwen3 tokenizer: a real Hugging Face fast tokenizer built without the hub.

Why this exists: piexp's default models are Qwen3 models, and the tinker cookbook
renderers need the model's Hugging Face tokenizer.  The cookbook normally downloads
it from the Hugging Face hub, which air-gapped runs and tests cannot reach.  The
installed ``tml_renderers`` package carries the exact Qwen3 vocabulary (the byte
string of every token id and the special tokens), so we rebuild the tokenizer from
it:

* mergeable ranks = token ids in order (Qwen's vocabulary is a tiktoken-style
  rank table, so a token's id *is* its BPE rank);
* BPE merges are derived from those ranks the same way transformers'
  ``TikTokenConverter`` does it;
* normalizer NFC, the Qwen2/Qwen3 pre-tokenizer regex (single digits), byte-level
  pre-tokenizer/decoder, exactly like Qwen's published ``tokenizer.json``;
* the 26 added tokens at the ids ``tml_renderers`` reports, with the same
  "special" flags as Qwen3's ``tokenizer_config.json`` (``<think>``, ``<tool_call>``
  and friends are added but *not* special, so ``skip_special_tokens`` keeps them).

The result is saved once to a cache directory (building takes a few seconds, loading
well under one) and is registered with ``tinker_cookbook.tokenizer_utils`` so that
``get_tokenizer("Qwen/Qwen3-8B")`` works offline.

transformers 5.5.x raises ``RuntimeError: Already borrowed`` when one fast tokenizer
is used from several threads at once (transformers issue 47085).  Rollouts render
concurrently, so the tokenizer handed out here is wrapped in
:class:`ThreadSafeTokenizer`, which serialises every method call on the shared
backend with a lock while passing attribute access through.

transformers is imported lazily inside functions because importing it takes seconds.
"""

from __future__ import annotations

import array
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tokenizers import Tokenizer as RustTokenizer

__all__ = [
    "EncodeCache",
    "EncodeBudget",
    "MemoMiss",
    "QWEN3_MODEL_NAMES",
    "QWEN3_PRETOKENIZE_REGEX",
    "ThreadSafeTokenizer",
    "build_qwen3_tokenizer_dir",
    "load_offline_qwen3_tokenizer",
    "offline_qwen3_tokenizer_dir",
    "piexp_cache_dir",
    "register_offline_tokenizers",
]

#: Qwen3 models offered by tinker whose chat tokenizer is the Qwen3 one built here
#: (``tinker_cookbook.model_info`` recommends the ``qwen3`` / ``qwen3_instruct``
#: renderers for them).  Deliberately excluded: the ``-Base`` models (their Hugging
#: Face eos is ``<|endoftext|>``, not ``<|im_end|>``, and they use ``role_colon``),
#: the Qwen3-VL models (they need an image processor from the hub anyway) and
#: Qwen3.5+ (a different, larger vocabulary).  ``tests/test_tokenizer.py`` checks this
#: list against ``model_info`` so a cookbook upgrade that adds a model is noticed.
QWEN3_MODEL_NAMES: tuple[str, ...] = (
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen3-235B-A22B-Instruct-2507",
)

#: Pre-tokenizer regex of Qwen2/Qwen3's ``tokenizer.json`` (note ``\p{N}`` splits
#: numbers into single digits, unlike cl100k's ``\p{N}{1,3}``).
QWEN3_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

#: Added tokens of Qwen3 in id order, with the ``special`` flag of Qwen3's
#: ``tokenizer_config.json``.  Ids are not hard-coded: they are read from
#: ``tml_renderers`` and checked to be contiguous after the BPE vocabulary.
_QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

_EOS_TOKEN = "<|im_end|>"
_PAD_TOKEN = "<|endoftext|>"
_MODEL_MAX_LENGTH = 131072

#: Bump when the build recipe changes so stale caches are rebuilt, not trusted.
_BUILD_FORMAT_VERSION = 2
_MARKER_FILE = "piexp_tokenizer_build.json"
_CACHE_SUBDIR = ("tokenizers", "qwen3")


# --------------------------------------------------------------------------- paths


def piexp_cache_dir() -> Path:
    """Root of piexp's caches: ``$PIEXP_CACHE_DIR`` or ``~/.cache/piexp``.

    Read on every call (not at import) so tests and launchers can redirect it.
    """
    env = os.environ.get("PIEXP_CACHE_DIR", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "piexp"


def _qwen3_cache_path() -> Path:
    return piexp_cache_dir().joinpath(*_CACHE_SUBDIR)


def _tml_renderers_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tml_renderers")
    except PackageNotFoundError:  # pragma: no cover - source checkout
        return "unknown"


def _expected_marker() -> dict[str, Any]:
    return {"format_version": _BUILD_FORMAT_VERSION, "source": "tml_renderers.Qwen3Tokenizer"}


def _is_complete(path: Path) -> bool:
    """A cache dir is usable only if its marker (written last) matches this recipe."""
    try:
        marker = json.loads((path / _MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    expected = _expected_marker()
    return all(marker.get(k) == v for k, v in expected.items()) and (
        path / "tokenizer.json"
    ).is_file()


# --------------------------------------------------------------------------- build


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2 byte -> printable unicode map used by byte-level BPE vocabularies."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def _qwen3_ranks_and_specials() -> tuple[dict[bytes, int], list[tuple[str, int, bool]]]:
    """Read mergeable ranks and added-token ids from ``tml_renderers``.

    Every id below the first special id is a BPE token whose bytes we take from
    ``decode_bytes``; its rank is its id.  Special ids are verified against
    ``encode_special`` so a vocabulary change upstream fails loudly here instead of
    silently shifting ids.
    """
    from tml_renderers.tokenizers import Qwen3Tokenizer

    tml = Qwen3Tokenizer()
    specials: list[tuple[str, int, bool]] = []
    for content, special in _QWEN3_ADDED_TOKENS:
        specials.append((content, int(tml.encode_special(content)), special))
    ids = [tid for _, tid, _ in specials]
    first = ids[0]
    if ids != list(range(first, first + len(ids))):
        raise RuntimeError(f"Qwen3 special token ids are not contiguous: {ids}")
    unknown = set(tml.all_special_tokens) - {c for c, _ in _QWEN3_ADDED_TOKENS}
    if unknown:
        raise RuntimeError(f"tml_renderers' Qwen3 tokenizer has unexpected specials: {unknown}")

    ranks: dict[bytes, int] = {}
    for rank in range(first):
        piece = bytes(tml.decode_bytes([rank]))
        if piece in ranks:
            raise RuntimeError(f"duplicate Qwen3 token bytes {piece!r} at ids {ranks[piece]}, {rank}")
        ranks[piece] = rank
    return ranks, specials


def _recover_merge(token: bytes, ranks: dict[bytes, int]) -> tuple[bytes, bytes] | None:
    """The pair whose merge produces ``token`` under tiktoken's rank-based BPE.

    Run byte-level BPE on the token's own bytes using only lower-ranked tokens (what
    tiktoken does: always merge the adjacent pair whose concatenation has the lowest
    rank, leftmost on ties); the two parts left at the end are the merge that makes
    ``token``.  ``None`` when the token cannot be reached that way.
    """
    limit = ranks[token]
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_i, best_rank = -1, limit
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_i, best_rank = i, r
        if best_i < 0:
            return None
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte-level vocab and BPE merges equivalent to tiktoken's rank-based merging.

    One merge per multi-byte token, recovered by :func:`_recover_merge` and ordered by
    the produced token's rank, so HF's merge-priority BPE replays tiktoken's choices
    (this is how Qwen's own ``merges.txt`` relates to ``qwen.tiktoken``: 151,387 merges
    for 151,643 tokens).  A token no merge sequence reaches (none in Qwen3, but kept
    for safety) falls back to transformers' ``TikTokenConverter`` rule: every split
    into two known tokens.  Half the merges of that rule also halves the
    ``tokenizer.json`` size and its load time.
    """
    byte_encoder = _bytes_to_unicode()

    def to_str(b: bytes) -> str:
        return "".join(byte_encoder[x] for x in b)

    vocab: dict[str, int] = {}
    merges: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        vocab[to_str(token)] = rank
        if len(token) < 2:
            continue
        pair = _recover_merge(token, ranks)
        candidates = [pair] if pair is not None else [(token[:i], token[i:]) for i in range(1, len(token))]
        for left, right in candidates:
            lr, rr = ranks.get(left), ranks.get(right)
            if lr is not None and rr is not None:
                merges.append((rank, lr, rr, left, right))
    merges.sort(key=lambda m: (m[0], m[1], m[2]))
    return vocab, [(to_str(left), to_str(right)) for _, _, _, left, right in merges]


def _build_backend() -> RustTokenizer:
    """Assemble the ``tokenizers`` object mirroring Qwen3's ``tokenizer.json``."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE

    ranks, specials = _qwen3_ranks_and_specials()
    vocab, merges = _vocab_and_merges(ranks)
    if len(vocab) != specials[0][1]:
        raise RuntimeError(f"BPE vocab has {len(vocab)} entries, expected {specials[0][1]}")
    model = BPE(
        vocab,
        merges,
        dropout=None,
        unk_token=None,
        continuing_subword_prefix="",
        end_of_word_suffix="",
        fuse_unk=False,
        byte_fallback=False,
    )
    # tiktoken (and tml_renderers) take a pre-token that is itself in the vocabulary
    # as one token; ignore_merges gives the BPE model the same shortcut.
    model.ignore_merges = True
    tok = Tokenizer(model)
    # tml_renderers and Qwen's published tokenizer both NFC-normalise first.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN3_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    # Added in id order: tokenizers assigns the next free id, which is the verified one.
    for content, expected_id, special in specials:
        tok.add_tokens(
            [AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)]
        )
        got = tok.token_to_id(content)
        if got != expected_id:
            raise RuntimeError(f"{content} got id {got}, expected {expected_id}")
    return tok


def _write_tokenizer_files(out_dir: Path) -> None:
    """Write a ``save_pretrained`` directory loadable by transformers, plus our marker."""
    from transformers import PreTrainedTokenizerFast

    backend = _build_backend()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=_EOS_TOKEN,
        pad_token=_PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        model_max_length=_MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        errors="replace",
        add_bos_token=False,
        # Mirrors Qwen3's additional_special_tokens (the "special" added tokens).
        extra_special_tokens=[c for c, s in _QWEN3_ADDED_TOKENS if s and c != _PAD_TOKEN],
    )
    hf.save_pretrained(str(out_dir))
    digest = hashlib.sha256((out_dir / "tokenizer.json").read_bytes()).hexdigest()
    marker = {
        **_expected_marker(),
        "tml_renderers_version": _tml_renderers_version(),
        "tokenizer_json_sha256": digest,
    }
    (out_dir / _MARKER_FILE).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")


_BUILD_LOCK = threading.Lock()


def build_qwen3_tokenizer_dir(target: Path | None = None, *, force: bool = False) -> Path:
    """Build the tokenizer into ``target`` atomically and return ``target``.

    Written into a temporary sibling directory and renamed into place, so a crash or
    a concurrent process never leaves a half-written cache that later loads as a
    broken tokenizer.  If another process wins the race, its copy is kept.
    """
    target = Path(target) if target is not None else _qwen3_cache_path()
    with _BUILD_LOCK:
        if not force and _is_complete(target):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            tmp.chmod(0o755)  # mkdtemp makes it owner-only; a shared cache should be readable
            _write_tokenizer_files(tmp)
            if target.exists():
                if not force and _is_complete(target):  # another process finished first
                    return target
                # Stale or broken: move aside first (rename is atomic), then delete.
                trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.replace(target, trash / "old")
                shutil.rmtree(trash, ignore_errors=True)
            try:
                os.rename(tmp, target)
            except OSError:
                if not _is_complete(target):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def offline_qwen3_tokenizer_dir() -> Path:
    """Directory of the cached Qwen3 tokenizer, building it first if missing or stale."""
    path = _qwen3_cache_path()
    if _is_complete(path):
        return path
    return build_qwen3_tokenizer_dir(path)


# --------------------------------------------------------------------------- thread safety

#: Methods the cookbook renderers and training code call; guarded explicitly so they
#: are visible (and documented) rather than relying only on ``__getattr__``.
_LOCKED_METHODS = (
    "batch_decode",
    "tokenize",
    "convert_tokens_to_ids",
    "convert_ids_to_tokens",
    "convert_tokens_to_string",
    "apply_chat_template",
    "pad",
)


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


#: Keyword arguments of ``encode`` that the memo keys on (any other: not memoised).
_CACHEABLE_ENCODE_KWARGS = frozenset({"add_special_tokens", "split_special_tokens"})

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


#: Methods after which cached encodings may be stale (the vocabulary changed).
_INVALIDATING_METHODS = frozenset({"add_tokens", "add_special_tokens", "set_special_tokens", "train_new_from_iterator"})


class ThreadSafeTokenizer:
    """A tokenizer proxy that serialises calls into a shared fast tokenizer.

    Why: the Rust ``tokenizers`` backend is a ``RefCell``-like object; transformers
    5.5.x mutates it (truncation/padding state) during encode, so two threads encoding
    at once hit ``RuntimeError: Already borrowed`` (transformers issue 47085).
    Tokenization is cheap compared with sampling, so one lock per backend costs
    little.  Every method reached through the proxy runs under that lock; plain
    attributes (``eos_token_id``, ``name_or_path``, ``all_special_ids``...) pass
    through unchanged, so the proxy behaves as the tokenizer for the cookbook.

    Several proxies may share one backend and lock (one per registered model name,
    each with its own ``name_or_path`` so pickled renderers rebuild by that name).

    ``encode(text, add_special_tokens=..., split_special_tokens=...)`` of a ``str``
    (either keyword optional, nothing else) is memoised in an :class:`EncodeCache` (shared by the proxies of one backend): a hit
    neither takes the lock nor enters transformers.  Any other form of ``encode``
    (extra arguments, non-``str`` input) goes to the tokenizer as before.  Setting an
    attribute through the proxy or adding tokens clears the cache. :meth:`encode_budget`
    lets a caller find out cheaply whether some work needs much tokenizing.
    """

    def __init__(
        self,
        tokenizer: Any,
        lock: threading.RLock | None = None,
        name_or_path: str | None = None,
        encode_cache: EncodeCache | None = None,
    ):
        object.__setattr__(self, "_tokenizer", tokenizer)
        object.__setattr__(self, "_lock", lock if lock is not None else threading.RLock())
        object.__setattr__(self, "_name_or_path", name_or_path)
        object.__setattr__(self, "_encode_cache", encode_cache if encode_cache is not None else EncodeCache())
        object.__setattr__(self, "_local", threading.local())
        object.__setattr__(self, "_rust_decoder", _plain_rust_decoder(tokenizer))

    def encode(self, text: Any, *args: Any, **kwargs: Any) -> Any:
        """``encode`` of the wrapped tokenizer, memoised for a plain ``str`` (see above)."""
        budget: EncodeBudget | None = getattr(self._local, "budget", None)
        cacheable = not args and type(text) is str and kwargs.keys() <= _CACHEABLE_ENCODE_KWARGS
        if cacheable:
            special = kwargs.get("add_special_tokens", True)
            split = kwargs.get("split_special_tokens")
            cacheable = type(special) is bool and (split is None or type(split) is bool)
        if not cacheable:
            if budget is not None:
                raise budget.refuse("encode called in a form the memo does not hold")
            with self._lock:
                return self._tokenizer.encode(text, *args, **kwargs)
        options = (special, split)
        cache = self._encode_cache
        ids = cache.get(text, options)
        if ids is not None:
            return ids
        if budget is not None:
            if len(text) > budget.remaining:
                raise budget.refuse("new text beyond the encode budget")
            budget.remaining -= len(text)
        with self._lock:
            ids = self._tokenizer.encode(text, **kwargs)
        if isinstance(ids, list):
            cache.put(text, options, ids)
            return list(ids)
        return ids

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> Any:
        """``decode`` of the wrapped tokenizer, under the backend lock.

        For a plain list of ids and no other option, a transformers fast tokenizer does
        nothing but the Rust backend's ``decode`` (plus a clean-up that is off for
        Qwen3), after converting the ids one by one in Python; that case goes straight
        to the backend (the renderer decodes every sampled action this way).
        """
        rust = self._rust_decoder
        if (
            rust is not None
            and not kwargs
            and type(token_ids) is list
            and type(skip_special_tokens) is bool
            and self._tokenizer.clean_up_tokenization_spaces is False
        ):
            with self._lock:
                try:
                    return rust.decode(token_ids, skip_special_tokens=skip_special_tokens)
                except TypeError:  # not a flat list of ints: let transformers handle it
                    pass
        with self._lock:
            return self._tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)

    @property
    def encode_cache(self) -> EncodeCache:
        """The memo of ``encode`` results (shared by the proxies of one backend)."""
        return self._encode_cache

    def encode_budget(self, chars: int) -> EncodeBudget:
        """A context manager under which ``encode`` (in this thread) tokenizes at most
        ``chars`` characters of text the memo does not hold, and raises
        :class:`MemoMiss` for more. For work that is cheap when (nearly) everything it
        encodes is memoised and worth a worker thread otherwise:
        ``with tok.encode_budget(n) as budget: ...``, then trust the result if not
        ``budget.missed``. ``encode_budget(0)``: answer from the memo only."""
        return EncodeBudget(self._local, chars)

    # -- explicit, frequently used entry points
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._tokenizer(*args, **kwargs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._tokenizer)

    def __repr__(self) -> str:
        return f"ThreadSafeTokenizer({self.name_or_path!r})"

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        # Rebuild from the cache by name instead of pickling the Rust backend.
        return (_unpickle_tokenizer, (self._name_or_path,))

    @property
    def name_or_path(self) -> str:
        return self._name_or_path if self._name_or_path is not None else self._tokenizer.name_or_path

    @property
    def unwrapped(self) -> Any:
        """The underlying transformers tokenizer (not thread-safe; use with care)."""
        return self._tokenizer

    @property
    def lock(self) -> threading.RLock:
        """The lock guarding the backend, for callers that must use ``unwrapped``."""
        return self._lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._tokenizer, name)
        if callable(attr) and getattr(attr, "__self__", None) is self._tokenizer:
            lock = self._lock

            cache = self._encode_cache if name in _INVALIDATING_METHODS else None

            @functools.wraps(attr)
            def locked(*args: Any, **kwargs: Any) -> Any:
                with lock:
                    try:
                        return attr(*args, **kwargs)
                    finally:
                        if cache is not None:
                            cache.clear()

            return locked
        return attr

    def __setattr__(self, name: str, value: Any) -> None:
        with self._lock:
            setattr(self._tokenizer, name, value)
            self._encode_cache.clear()

    def __dir__(self) -> Iterable[str]:
        return sorted(set(dir(type(self))) | set(dir(self._tokenizer)))


def _plain_rust_decoder(tokenizer: Any) -> Any:
    """The Rust backend of a transformers fast tokenizer whose ``decode`` is the stock
    one (``to_py_obj``, then ``_decode``: the backend's ``decode`` and an optional
    clean-up), else None."""
    cls = type(tokenizer)
    decode, _decode = getattr(cls, "decode", None), getattr(cls, "_decode", None)
    if (
        getattr(decode, "__module__", None) != "transformers.tokenization_utils_base"
        or getattr(_decode, "__module__", None) != "transformers.tokenization_utils_tokenizers"
    ):
        return None
    return getattr(tokenizer, "backend_tokenizer", None)


def _make_locked(method: str) -> Callable[..., Any]:
    def locked(self: ThreadSafeTokenizer, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return getattr(self._tokenizer, method)(*args, **kwargs)

    locked.__name__ = method
    locked.__doc__ = f"``{method}`` of the wrapped tokenizer, under the backend lock."
    return locked


for _m in _LOCKED_METHODS:
    setattr(ThreadSafeTokenizer, _m, _make_locked(_m))
del _m


# --------------------------------------------------------------------------- loading

_LOAD_LOCK = threading.Lock()
_backend: tuple[Any, threading.RLock, EncodeCache] | None = None
_proxies: dict[str | None, ThreadSafeTokenizer] = {}


def _shared_backend() -> tuple[Any, threading.RLock, EncodeCache]:
    """The process-wide transformers tokenizer, its lock and its encode memo (loaded once)."""
    global _backend
    with _LOAD_LOCK:
        if _backend is None:
            from transformers import PreTrainedTokenizerFast

            path = offline_qwen3_tokenizer_dir()
            tok = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
            _backend = (tok, threading.RLock(), EncodeCache())
        return _backend


def load_offline_qwen3_tokenizer(name_or_path: str | None = None) -> ThreadSafeTokenizer:
    """Process-wide cached, thread-safe Qwen3 tokenizer (never touches the network).

    ``name_or_path`` only sets what the proxy reports as ``name_or_path`` (the
    cookbook stamps it into renderers for pickling); all proxies share one backend.
    """
    tok, lock, cache = _shared_backend()
    with _LOAD_LOCK:
        proxy = _proxies.get(name_or_path)
        if proxy is None:
            proxy = ThreadSafeTokenizer(tok, lock, name_or_path, cache)
            _proxies[name_or_path] = proxy
        return proxy


def _unpickle_tokenizer(name_or_path: str | None) -> ThreadSafeTokenizer:
    return load_offline_qwen3_tokenizer(name_or_path)


def register_offline_tokenizers(model_names: Iterable[str] = QWEN3_MODEL_NAMES) -> list[str]:
    """Make ``tinker_cookbook.tokenizer_utils.get_tokenizer(name)`` return our tokenizer.

    Registration is lazy: the factory loads (or builds) the tokenizer on first use,
    so calling this at start-up costs nothing.  Returns the registered names.
    """
    from tinker_cookbook.tokenizer_utils import register_tokenizer

    names = list(model_names)
    for name in names:
        register_tokenizer(name, functools.partial(load_offline_qwen3_tokenizer, name))
    return names
