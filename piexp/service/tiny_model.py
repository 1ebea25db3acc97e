"""`model=tiny-local`: a random-weight 2-layer Qwen3 with a smaller vocabulary of the real
(offline) Qwen3 tokenizer: its first 8,192 BPE tokens, then its 26 special and tool-call
tokens (learner-local's vocabulary).

It exists so that `service=local` can train offline and fast on a CPU: the weights are
random (seeded, so every machine builds the same model), but the tokenizer is Qwen3's own
BPE, special tokens and chat format, so the `qwen3` renderer, the Pi tool-call format and
the parser are exercised exactly as with a real Qwen3. The smaller vocabulary is what
keeps it fast: at hidden size 64 the output layer and its log-softmax over Qwen3's
151,936 entries were nearly all of a training step and of a sampled token
(bench/vocabulary.py). Built once (a few seconds) into piexp's cache with transformers +
torch from piexp's own environment; the folder is used as `base_model` by the server and
as `model_name` by tinker-cookbook (which loads a local path and its tokenizer).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from piexp.files import exclusive_lock

__all__ = [
    "TINY_LOCAL_CONFIG",
    "TINY_LOCAL_NAME",
    "TINY_QWEN3_CONFIG",
    "copy_tokenizer_files",
    "ensure_tiny_model",
    "tiny_model_dir",
    "tiny_tokenizer_dir",
    "with_smaller_vocabulary",
]

TINY_LOCAL_NAME = "tiny-local"
SEED = 0

#: Qwen3 architecture at toy size, with Qwen3's whole vocabulary and special ids (the base
#: of learner-local's recipe, whose content key reads it; tiny-local's own vocabulary is
#: :data:`TINY_BPE_TOKENS`).
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

ADDED_TOKENS = 26  # Qwen3's added tokens (piexp.tokenizer.build)


def with_smaller_vocabulary(architecture: dict[str, Any], bpe_tokens: int) -> dict[str, Any]:
    """`architecture` with the vocabulary size and special ids of Qwen3's tokenizer cut to
    its first `bpe_tokens` BPE tokens: its added tokens follow them (<|endoftext|>,
    <|im_start|>, <|im_end|>, ..., <think>, </think>)."""
    return {
        **architecture,
        "vocab_size": bpe_tokens + ADDED_TOKENS,
        "bos_token_id": bpe_tokens,
        "pad_token_id": bpe_tokens,
        "eos_token_id": bpe_tokens + 2,
    }


#: tiny-local's vocabulary: Qwen3's first BPE tokens, then its added tokens.
TINY_BPE_TOKENS = 8192
TINY_LOCAL_CONFIG: dict[str, Any] = with_smaller_vocabulary(TINY_QWEN3_CONFIG, TINY_BPE_TOKENS)

#: End-of-turn prior. With purely random weights the model's next-token distribution is
#: nearly uniform over its vocabulary, so it practically never samples `<|im_end|>`: every
#: turn runs to the token limit, every episode gets the same (truncation) reward and RL
#: sees no reward variance, hence zero gradients. A shared component on one hidden
#: dimension of every token embedding, read by the `<|im_end|>` row of the (untied)
#: output layer, gives `<|im_end|>` a roughly constant logit: about 1 in
#: `1 + 8,217 / exp(EOS_LOGIT)` sampled tokens ends the turn (about 1 in 740, as it was
#: with Qwen3's whole vocabulary and a logit of 5.33), so turn lengths are roughly
#: geometric with mean ~740 tokens: at a 512-token generation limit about half the turns
#: end on their own and half are cut off, which gives groups different rewards. The other
#: added tokens read the same component with OTHER_ADDED_LOGIT, so that each is as rare as
#: one token among Qwen3's whole vocabulary (1 in ~152k): a random turn opens a tool call
#: or a new message no more often than it did. Everything else stays random.
EOS_TOKEN_ID = TINY_LOCAL_CONFIG["eos_token_id"]
SHARED_EMBEDDING_COMPONENT = 1.0
EOS_LOGIT = 2.41
OTHER_ADDED_LOGIT = -2.92

_MARKER = "piexp_tiny_model.json"
_FORMAT_VERSION = 4


def tiny_model_dir() -> Path:
    from piexp.tokenizer import piexp_cache_dir

    return piexp_cache_dir() / "models" / TINY_LOCAL_NAME


def _expected_marker() -> dict[str, Any]:
    return {
        "format_version": _FORMAT_VERSION,
        "seed": SEED,
        "config": TINY_LOCAL_CONFIG,
        "eos_prior": {
            "shared_component": SHARED_EMBEDDING_COMPONENT,
            "eos_logit": EOS_LOGIT,
            "other_added_logit": OTHER_ADDED_LOGIT,
        },
    }


def _is_complete(path: Path) -> bool:
    try:
        marker = json.loads((path / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return marker == _expected_marker() and (path / "model.safetensors").is_file()


def tiny_tokenizer_dir() -> Path:
    """The folder of tiny-local's tokenizer (Qwen3's, cut to TINY_BPE_TOKENS), built
    offline on first use."""
    from piexp.tokenizer import offline_qwen3_tokenizer_dir

    return offline_qwen3_tokenizer_dir(TINY_BPE_TOKENS)


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
    model = AutoModelForCausalLM.from_config(Qwen3Config(**TINY_LOCAL_CONFIG), dtype=torch.float32)
    with torch.no_grad():
        # The end-of-turn prior (see EOS_LOGIT). After the final RMSNorm the shared
        # component dominates dimension 0 at about sqrt(hidden_size).
        model.model.embed_tokens.weight[:, 0] += SHARED_EMBEDDING_COMPONENT
        head = model.lm_head.weight
        scale = TINY_LOCAL_CONFIG["hidden_size"] ** 0.5
        head[TINY_BPE_TOKENS:].zero_()
        head[TINY_BPE_TOKENS:, 0] = OTHER_ADDED_LOGIT / scale
        head[EOS_TOKEN_ID, 0] = EOS_LOGIT / scale
    model.save_pretrained(staging)
    copy_tokenizer_files(staging, tiny_tokenizer_dir())
    (staging / _MARKER).write_text(json.dumps(_expected_marker(), indent=2), encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target
