"""Registration of the offline Qwen3 tokenizer with ``tinker_cookbook.tokenizer_utils``,
so that ``get_tokenizer("Qwen/Qwen3-8B")`` works without the Hugging Face hub."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import cast

from .proxy import load_offline_qwen3_tokenizer

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


def register_offline_tokenizer(name: str, source: str | None = None) -> None:
    """Make ``tinker_cookbook.tokenizer_utils.get_tokenizer(name)`` return the offline
    Qwen3 tokenizer of `source` (a tokenizer or model folder; default: `name` itself, a
    Qwen3 model name or a local model folder). The one place piexp registers a tokenizer
    with the cookbook. Lazy: the tokenizer is loaded (or built) on first use."""
    from tinker_cookbook.tokenizer_utils import Tokenizer, register_tokenizer

    # The proxy stands in for the tokenizer the cookbook expects (it forwards every other
    # attribute to the wrapped one), which the type checker cannot see.
    factory = cast("Callable[[], Tokenizer]", functools.partial(load_offline_qwen3_tokenizer, source or name))
    register_tokenizer(name, factory)


def register_offline_tokenizers(model_names: Iterable[str] = QWEN3_MODEL_NAMES) -> list[str]:
    """`register_offline_tokenizer` for each of `model_names` (the Qwen3 models by
    default); returns the registered names. Costs nothing at start-up."""
    names = list(model_names)
    for name in names:
        register_offline_tokenizer(name)
    return names
