"""The tiny-local model: deterministic, Qwen3-shaped, with a smaller vocabulary of the
offline Qwen3 tokenizer, and its end-of-turn prior."""

from __future__ import annotations

import hashlib
import json

from piexp.service.tiny_model import EOS_TOKEN_ID, TINY_BPE_TOKENS, TINY_QWEN3_CONFIG, ensure_tiny_model


def _digest(path) -> str:  # type: ignore[no-untyped-def]
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


def test_built_once_deterministically(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PIEXP_CACHE_DIR", str(tmp_path / "a"))
    first = ensure_tiny_model()
    mtime = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny_model() == first and (first / "model.safetensors").stat().st_mtime_ns == mtime  # cached
    monkeypatch.setenv("PIEXP_CACHE_DIR", str(tmp_path / "b"))
    second = ensure_tiny_model()
    assert _digest(first) == _digest(second)  # same seed, same bytes on every machine

    config = json.loads((first / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["num_hidden_layers"] == TINY_QWEN3_CONFIG["num_hidden_layers"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(first)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == EOS_TOKEN_ID
    # Qwen3's added tokens follow its first BPE tokens, in Qwen3's order.
    assert tokenizer.convert_tokens_to_ids("<tool_call>") == TINY_BPE_TOKENS + 151657 - 151643
    assert config["vocab_size"] == len(tokenizer) == TINY_BPE_TOKENS + 26
    ids = tokenizer.encode("print(sum(values)) # 42 ✓")
    assert max(ids) < TINY_BPE_TOKENS and tokenizer.decode(ids) == "print(sum(values)) # 42 ✓"


def test_the_end_of_turn_prior_gives_turns_that_end_about_half_the_time_at_512_tokens() -> None:
    """The prior's numbers are tuned to the vocabulary: about 1 sampled token in 740 ends
    the turn (so at a 512-token limit about half the turns end on their own and half are
    cut off: groups get different rewards), and every other added token (a tool call's
    opening, a new message) is as rare as one token of Qwen3's 151,936 (1 in ~152k)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ensure_tiny_model())
    contexts = torch.randint(0, TINY_BPE_TOKENS, (32, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        probs = torch.softmax(model(contexts).logits.double(), dim=-1).reshape(-1, model.config.vocab_size)
    eos = probs[:, EOS_TOKEN_ID].mean().item()
    assert 1 / 1100 < eos < 1 / 500, 1 / eos
    ends_by_512 = 1 - (1 - eos) ** 512
    assert 0.35 < ends_by_512 < 0.65, ends_by_512
    others = [index for index in range(TINY_BPE_TOKENS, model.config.vocab_size) if index != EOS_TOKEN_ID]
    assert probs[:, others].mean(dim=0).max().item() < 1 / 80_000
