"""The scripted policies' decode memo (`DecodeCache`): an input extending a remembered
one decodes only its new tokens, and the text is always exactly the full decode."""

from __future__ import annotations

import random
import threading

from piexp.env.episode import get_run_renderer
from piexp.policies.observation import DecodeCache


def _tokenizer():
    return get_run_renderer("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507").tokenizer


def _full(tok):
    def decode_all(ids):
        with tok.lock:
            return tok.unwrapped.backend_tokenizer.decode(ids, skip_special_tokens=False)

    return decode_all


def test_extension_hits_and_matches_full_decode() -> None:
    tok = _tokenizer()
    decode_all = _full(tok)
    seen: list[list[int]] = []
    cache = DecodeCache()
    calls: list[int] = []

    def counting(ids):
        calls.append(len(ids))
        return decode_all(ids)

    ids = tok.encode("<|im_start|>system\nYou are helpful.<|im_end|>\n", add_special_tokens=False)
    for turn in range(5):
        ids = ids + tok.encode(f"<|im_start|>user\nturn {turn}: 日本語 ✓<|im_end|>\n", add_special_tokens=False)
        seen.append(ids)
        assert cache.decode(ids, counting) == decode_all(ids)
    assert cache.hits == 4 and cache.misses == 1
    assert calls[0] == len(seen[0]) and all(n < len(s) for n, s in zip(calls[1:], seen[1:]))


def test_split_inside_a_character_falls_back_to_a_full_decode() -> None:
    tok = _tokenizer()
    decode_all = _full(tok)
    # Byte-level tokens of a character outside the common vocabulary: find a split
    # whose prefix ends mid-character (its text ends with U+FFFD).
    ids = tok.encode("a 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 b", add_special_tokens=False)
    split = next(i for i in range(1, len(ids)) if decode_all(ids[:i]).endswith("\ufffd"))
    cache = DecodeCache()
    cache.decode(ids[:split], decode_all)
    assert cache.decode(ids, decode_all) == decode_all(ids)
    assert "\ufffd" not in cache.decode(ids, decode_all)


def test_bounded_by_entries_and_tokens() -> None:
    cache = DecodeCache(max_entries=2, max_tokens=10)
    text = lambda ids: ",".join(map(str, ids))  # noqa: E731
    for start in range(4):
        cache.decode([start, start + 1], text)
    assert len(cache) == 2
    cache.decode(list(range(100, 109)), text)  # 9 tokens: the others leave to fit 10
    assert len(cache) == 1
    cache.decode(list(range(200, 220)), text)  # more than max_tokens: not kept
    assert len(cache) == 1


def test_exact_under_threads() -> None:
    """Threads decode growing conversations that share a prefix; every text is the
    full decode of its tokens."""
    tok = _tokenizer()
    decode_all = _full(tok)
    base = tok.encode("<|im_start|>system\nshared prompt<|im_end|>\n", add_special_tokens=False)
    cache = DecodeCache(max_entries=8)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        ids = list(base)
        try:
            for turn in range(30):
                ids += tok.encode(
                    f"<|im_start|>user\n{seed}:{turn} {'é' * rng.randint(0, 5)}<|im_end|>\n", add_special_tokens=False
                )
                assert cache.decode(ids, decode_all) == decode_all(ids)
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert cache.hits > 0
