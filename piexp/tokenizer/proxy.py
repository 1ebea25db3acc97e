"""The thread-safe tokenizer proxy and the process-wide shared Qwen3 tokenizer it wraps.

transformers 5.5.x raises ``RuntimeError: Already borrowed`` when one fast tokenizer
is used from several threads at once (transformers issue 47085), and rollouts render
concurrently: ``ThreadSafeTokenizer`` serialises every method call on the shared
backend with a lock while passing attribute access through, and memoises ``encode``
(memo.py). ``load_offline_qwen3_tokenizer`` loads the built tokenizer (build.py) once
per process and hands out one proxy per model name."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .build import offline_qwen3_tokenizer_dir
from .memo import EncodeBudget, EncodeCache
from .snapshot import load_tokenizer

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


#: Keyword arguments of ``encode`` that the memo keys on (any other: not memoised).
_CACHEABLE_ENCODE_KWARGS = frozenset({"add_special_tokens", "split_special_tokens"})

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
#: One backend per tokenizer (by the digest of its ``tokenizer.json``): Qwen3's, and the
#: smaller vocabulary a local model folder may carry.
_backends: dict[str, tuple[Any, threading.RLock, EncodeCache]] = {}
_proxies: dict[str | None, ThreadSafeTokenizer] = {}


def _tokenizer_dir(name_or_path: str | None) -> Path:
    """A model folder's own tokenizer files where it has them, else the offline Qwen3 one."""
    if name_or_path and (Path(name_or_path) / "tokenizer.json").is_file():
        return Path(name_or_path)
    return offline_qwen3_tokenizer_dir()


def _shared_backend(path: Path) -> tuple[Any, threading.RLock, EncodeCache]:
    """The process-wide transformers tokenizer of `path`, its lock and its encode memo
    (loaded once per distinct tokenizer)."""
    digest = hashlib.sha256((path / "tokenizer.json").read_bytes()).hexdigest()
    with _LOAD_LOCK:
        backend = _backends.get(digest)
        if backend is None:
            tok = load_tokenizer(path)
            backend = _backends[digest] = (tok, threading.RLock(), EncodeCache())
        return backend


def load_offline_qwen3_tokenizer(name_or_path: str | None = None) -> ThreadSafeTokenizer:
    """Process-wide cached, thread-safe Qwen3 tokenizer (never touches the network).

    ``name_or_path`` is what the proxy reports as ``name_or_path`` (the cookbook stamps
    it into renderers for pickling); a model folder with its own tokenizer files gets
    that tokenizer (a smaller Qwen3 vocabulary), any other name Qwen3's. Proxies of one
    tokenizer share one backend.
    """
    with _LOAD_LOCK:
        proxy = _proxies.get(name_or_path)
    if proxy is not None:
        return proxy
    tok, lock, cache = _shared_backend(_tokenizer_dir(name_or_path))
    with _LOAD_LOCK:
        proxy = _proxies.get(name_or_path)
        if proxy is None:
            proxy = ThreadSafeTokenizer(tok, lock, name_or_path, cache)
            _proxies[name_or_path] = proxy
        return proxy


def _unpickle_tokenizer(name_or_path: str | None) -> ThreadSafeTokenizer:
    return load_offline_qwen3_tokenizer(name_or_path)
