"""`model=tiny-local`: a random-weight 2-layer Qwen3 with the real (offline) Qwen3 tokenizer.

It exists so that `service=local` can train offline and fast on a CPU: the weights are
random (seeded, so every machine builds the same model), but the tokenizer is the real
Qwen3 one, so the `qwen3` renderer, the Pi tool-call format and the parser are exercised
exactly as with a real Qwen3. Built once (a few seconds, ~50 MB) into piexp's cache with
transformers + torch from piexp's own environment; the folder is used as `base_model`
by the server and as `model_name` by tinker-cookbook (which loads a local path).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from piexp.files import exclusive_lock

__all__ = ["TINY_LOCAL_NAME", "TINY_QWEN3_CONFIG", "copy_tokenizer_files", "ensure_tiny_model", "tiny_model_dir"]

TINY_LOCAL_NAME = "tiny-local"
SEED = 0

#: Qwen3 architecture at toy size; vocabulary and special ids are Qwen3's.
TINY_QWEN3_CONFIG: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "pad_token_id": 151643,
}

#: End-of-turn prior. With purely random weights the model's next-token distribution is
#: nearly uniform over 152k tokens, so it practically never samples `<|im_end|>`: every
#: turn runs to the token limit, every episode gets the same (truncation) reward and RL
#: sees no reward variance, hence zero gradients. A shared component on one hidden
#: dimension of every token embedding, read by the `<|im_end|>` row of the (untied)
#: output layer, gives `<|im_end|>` a roughly constant logit: about 1 in
#: `1 + 152k / exp(EOS_LOGIT)` sampled tokens ends the turn (about 1 in 740 here), so turn
#: lengths are roughly geometric with mean ~740 tokens: at a 512-token generation limit
#: about half the turns end on their own and half are cut off, which gives groups
#: different rewards. Everything else stays random.
EOS_TOKEN_ID = 151645
SHARED_EMBEDDING_COMPONENT = 1.0
EOS_LOGIT = 5.33

_MARKER = "piexp_tiny_model.json"
_FORMAT_VERSION = 3


def tiny_model_dir() -> Path:
    from piexp.tokenizer import piexp_cache_dir

    return piexp_cache_dir() / "models" / TINY_LOCAL_NAME


def _expected_marker() -> dict[str, Any]:
    return {
        "format_version": _FORMAT_VERSION,
        "seed": SEED,
        "config": TINY_QWEN3_CONFIG,
        "eos_prior": {"shared_component": SHARED_EMBEDDING_COMPONENT, "eos_logit": EOS_LOGIT},
    }


def _is_complete(path: Path) -> bool:
    try:
        marker = json.loads((path / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker == _expected_marker() and (path / "model.safetensors").is_file()


def copy_tokenizer_files(model_dir: Path, tokenizer_dir: Path | None = None) -> None:
    """Put a tokenizer's files (by default the offline Qwen3 tokenizer's) into a model
    folder: loaders expect them there, and piexp loads a folder's own tokenizer."""
    from piexp.tokenizer import offline_qwen3_tokenizer_dir

    for source in (tokenizer_dir or offline_qwen3_tokenizer_dir()).iterdir():
        if source.name.startswith("tokenizer") or source.name in ("special_tokens_map.json",):
            shutil.copy(source, model_dir / source.name)


def ensure_tiny_model() -> Path:
    """The tiny model folder, built (atomically) if missing or from another recipe."""
    target = tiny_model_dir()
    if _is_complete(target):
        return target
    # Concurrent builders would share (and delete) one staging folder: one at a time.
    with exclusive_lock(target.parent / f".{target.name}.lock"):
        if _is_complete(target):
            return target
        return _build_tiny_model(target)


def _build_tiny_model(target: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.building")
    shutil.rmtree(staging, ignore_errors=True)
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**TINY_QWEN3_CONFIG), dtype=torch.float32)
    with torch.no_grad():
        # The end-of-turn prior (see EOS_LOGIT). After the final RMSNorm the shared
        # component dominates dimension 0 at about sqrt(hidden_size).
        model.model.embed_tokens.weight[:, 0] += SHARED_EMBEDDING_COMPONENT
        head = model.lm_head.weight
        head[EOS_TOKEN_ID].zero_()
        head[EOS_TOKEN_ID, 0] = EOS_LOGIT / TINY_QWEN3_CONFIG["hidden_size"] ** 0.5
    model.save_pretrained(staging)
    copy_tokenizer_files(staging)
    (staging / _MARKER).write_text(json.dumps(_expected_marker(), indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target
