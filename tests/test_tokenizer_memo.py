"""The encode memo of `ThreadSafeTokenizer` (`EncodeCache`): hits, bounds, keying,
invalidation, and exact results under threads with the real Qwen3 tokenizer."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from piexp import tokenizer as ptok
from piexp.tokenizer import proxy as ptok_proxy


class FakeTokenizer:
    """Encodes a character as its code point (+ a shift that `add_tokens` changes)."""

    def __init__(self) -> None:
        self.calls = 0
        self.shift = 0

    def encode(
        self, text: Any, add_special_tokens: bool = True, split_special_tokens: bool | None = None, **_: Any
    ) -> list[int]:
        self.calls += 1
        ids = [ord(c) + self.shift for c in str(text)]
        if split_special_tokens:
            ids = [i + 1 for i in ids]
        return ([0] if add_special_tokens else []) + ids

    def add_tokens(self, tokens: list[str]) -> int:
        self.shift += 1000
        return len(tokens)


def test_hit_returns_equal_fresh_lists() -> None:
    fake = FakeTokenizer()
    tok = ptok.ThreadSafeTokenizer(fake)
    first = tok.encode("hello", add_special_tokens=False)
    first.append(-1)  # a caller mutating its list must not corrupt the memo
    second = tok.encode("hello", add_special_tokens=False)
    assert second == [104, 101, 108, 108, 111] and fake.calls == 1
    assert second is not tok.encode("hello", add_special_tokens=False)
    assert tok.encode_cache.hits == 2 and tok.encode_cache.misses == 1


def test_keyed_by_options() -> None:
    fake = FakeTokenizer()
    tok = ptok.ThreadSafeTokenizer(fake)
    plain = tok.encode("ab", add_special_tokens=False)
    special = tok.encode("ab")
    split = tok.encode("ab", add_special_tokens=False, split_special_tokens=True)
    assert (plain, special, split) == ([97, 98], [0, 97, 98], [98, 99])
    assert fake.calls == 3
    assert tok.encode("ab", add_special_tokens=True) == [0, 97, 98] and fake.calls == 3  # default is True


def test_other_calls_are_not_memoised() -> None:
    fake = FakeTokenizer()
    tok = ptok.ThreadSafeTokenizer(fake)
    for _ in range(2):
        tok.encode("ab", add_special_tokens=False, truncation=True)  # another keyword
        tok.encode(["a", "b"], add_special_tokens=False)  # not a str
        tok.encode("ab", False)  # positional options
    assert fake.calls == 6 and len(tok.encode_cache) == 0


def test_bounded_by_entries_and_chars() -> None:
    cache = ptok.EncodeCache(max_entries=3, max_chars=10, max_text_chars=6)
    for text in ("a", "b", "c", "d"):
        cache.put(text, None, [1])
    assert len(cache) == 3 and cache.get("a") is None and cache.get("d") == [1]  # LRU: "a" left
    cache.get("b")  # now most recent
    cache.put("eeeee", None, [2])  # 3 + 5 chars: fits; 4 entries: "c" (least recent) leaves
    assert cache.get("c") is None and cache.get("b") == [1]
    cache.put("ffffff", None, [3])  # 6 chars: over 10 in total, so the oldest leave
    assert cache.chars <= 10 and len(cache) <= 3 and cache.get("ffffff") == [3]
    cache.put("g" * 7, None, [4])  # longer than max_text_chars: never cached
    assert cache.get("g" * 7) is None and cache.chars <= 10


def test_adding_tokens_or_setting_attributes_clears() -> None:
    fake = FakeTokenizer()
    tok = ptok.ThreadSafeTokenizer(fake)
    assert tok.encode("a", add_special_tokens=False) == [97]
    tok.add_tokens(["<x>"])
    assert tok.encode("a", add_special_tokens=False) == [1097]
    tok.some_setting = 1
    assert len(tok.encode_cache) == 0


def test_encode_budget_bounds_new_tokenizing() -> None:
    fake = FakeTokenizer()
    tok = ptok.ThreadSafeTokenizer(fake)
    tok.encode("known", add_special_tokens=False)
    with tok.encode_budget(0) as budget:  # memo only
        assert tok.encode("known", add_special_tokens=False) == [107, 110, 111, 119, 110]
    assert not budget.missed and fake.calls == 1
    with tok.encode_budget(5) as budget:
        assert tok.encode("abc", add_special_tokens=False) == [97, 98, 99]  # 3 new chars: within
        try:
            tok.encode("def", add_special_tokens=False)  # 3 more: beyond the 2 left
        except ptok.MemoMiss:
            pass  # a caller swallowing the refusal still leaves budget.missed set
    assert budget.missed and fake.calls == 2
    with pytest.raises(ptok.MemoMiss), tok.encode_budget(100):
        tok.encode("known", add_special_tokens=False, truncation=True)  # a form never memoised
    assert tok.encode("def", add_special_tokens=False) == [100, 101, 102]  # outside: encodes
    assert fake.calls == 3

    # The budget is per thread: another thread encodes freely meanwhile.
    other: list[list[int]] = []
    with tok.encode_budget(0):
        thread = threading.Thread(target=lambda: other.append(tok.encode("fresh", add_special_tokens=False)))
        thread.start()
        thread.join()
    assert other == [[102, 114, 101, 115, 104]]


def test_proxies_of_one_backend_share_the_memo(monkeypatch) -> None:
    backend = (FakeTokenizer(), threading.RLock(), ptok.EncodeCache())
    monkeypatch.setattr(ptok_proxy, "_tokenizer_dir", lambda name: Path("/the/qwen3/tokenizer"))
    monkeypatch.setattr(ptok_proxy, "_shared_backend", lambda path: backend)
    monkeypatch.setattr(ptok_proxy, "_proxies", {})
    a, b = ptok.load_offline_qwen3_tokenizer("A"), ptok.load_offline_qwen3_tokenizer("B")
    a.encode("xyz", add_special_tokens=False)
    b.encode("xyz", add_special_tokens=False)
    assert a.encode_cache is b.encode_cache and a.unwrapped.calls == 1


@pytest.fixture(scope="module")
def qwen3() -> ptok.ThreadSafeTokenizer:
    from piexp.env.episode import get_run_renderer

    return get_run_renderer("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507").tokenizer


def _corpus() -> list[str]:
    rng = random.Random(5)
    words = [
        "def",
        "main",
        "(",
        ")",
        ":",
        "\n",
        "    ",
        "日本語",
        "é",
        "<|im_end|>",
        "<tool_call>",
        "12345",
        '{"schema": 1}',
        "print",
        " ",
        "\t",
        "x" * 50,
    ]
    return ["".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(200)]


def test_real_tokenizer_results_are_exact_under_threads(qwen3: ptok.ThreadSafeTokenizer) -> None:
    """16 threads encode overlapping texts with every memoised option set; each result
    equals transformers' own encode of that text, and the memo is hit."""
    corpus = _corpus()
    options = [{"add_special_tokens": False}, {"add_special_tokens": False, "split_special_tokens": True}, {}]
    raw = qwen3.unwrapped
    expected = {(i, j): raw.encode(text, **opts) for i, text in enumerate(corpus) for j, opts in enumerate(options)}
    hits_before = qwen3.encode_cache.hits
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            barrier.wait()
            for _ in range(300):
                i, j = rng.randrange(len(corpus)), rng.randrange(len(options))
                got = qwen3.encode(corpus[i], **options[j])
                assert got == expected[(i, j)], (corpus[i], options[j])
                got.append(-1)  # mutating a returned list never leaks into the memo
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert qwen3.encode_cache.hits - hits_before > 16 * 300 // 2
    # split_special_tokens really is part of the key: the two encodings differ.
    assert qwen3.encode("<|im_end|>", add_special_tokens=False) != qwen3.encode(
        "<|im_end|>", add_special_tokens=False, split_special_tokens=True
    )


def test_decode_fast_path_matches_transformers(qwen3: ptok.ThreadSafeTokenizer) -> None:
    """A plain list of ids goes straight to the Rust backend; every other form goes
    through transformers. Either way the text is transformers' own."""
    raw = qwen3.unwrapped
    assert qwen3._rust_decoder is not None
    for text in _corpus()[:50]:
        ids = raw.encode(text, add_special_tokens=False)
        for skip in (False, True):
            assert qwen3.decode(ids, skip_special_tokens=skip) == raw.decode(ids, skip_special_tokens=skip)
    assert qwen3.decode([]) == raw.decode([])
    assert qwen3.decode([[9707], [151645]]) == raw.decode([[9707], [151645]])  # batched: transformers
    assert qwen3.decode(9707) == raw.decode(9707)
    assert qwen3.decode((9707, 151645)) == raw.decode((9707, 151645))
    assert qwen3.decode([9707], clean_up_tokenization_spaces=True) == raw.decode(
        [9707], clean_up_tokenization_spaces=True
    )


def test_decode_of_an_unknown_tokenizer_goes_through_it() -> None:
    class Other:
        def decode(self, ids, skip_special_tokens=False):  # type: ignore[no-untyped-def]
            return f"decoded {ids} {skip_special_tokens}"

    tok = ptok.ThreadSafeTokenizer(Other())
    assert tok._rust_decoder is None
    assert tok.decode([1, 2], skip_special_tokens=True) == "decoded [1, 2] True"
