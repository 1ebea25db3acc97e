"""The tiny-local model: deterministic, Qwen3-shaped, with the offline Qwen3 tokenizer."""

from __future__ import annotations

import hashlib
import json

from piexp.service.tiny_model import EOS_TOKEN_ID, TINY_QWEN3_CONFIG, ensure_tiny_model


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
    assert tokenizer.convert_tokens_to_ids("<tool_call>") == 151657
