"""The offline Qwen3 tokenizer: a real Hugging Face fast tokenizer built from installed
packages without the hub (build.py), handed out behind a thread-safe proxy (proxy.py)
whose ``encode`` is memoised (memo.py), and registered with the tinker cookbook under
the Qwen3 model names (registration.py). The public names are importable from here."""

from .build import (
    QWEN3_PRETOKENIZE_REGEX,
    build_qwen3_tokenizer_dir,
    offline_qwen3_tokenizer_dir,
    piexp_cache_dir,
)
from .memo import EncodeBudget, EncodeCache, MemoMiss
from .proxy import ThreadSafeTokenizer, load_offline_qwen3_tokenizer
from .registration import QWEN3_MODEL_NAMES, register_offline_tokenizer, register_offline_tokenizers

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
    "register_offline_tokenizer",
    "register_offline_tokenizers",
]
