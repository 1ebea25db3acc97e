"""How large a vocabulary should `learner-local` have? For Qwen3's whole vocabulary and
for its first N BPE tokens (piexp.tokenizer.build, the added tokens after them), on
experiment=learn_offline's own text (each train task's instruction and files, and the
oracle's program for it, as the model reads and writes them):

* tokens per task, and that against the whole vocabulary's (a smaller vocabulary splits
  text into more tokens: longer sequences and more sampling steps);
* the output layer's share of a token's multiply-adds (its parameters against the
  non-embedding ones: a 2-layer model of hidden size 64 spends nearly all of its time
  there with 151,669 tokens);
* seconds of one forward and backward pass (exact softmax over the vocabulary at every
  position, as RL's training pass does) of the learner's architecture on one task's
  worth of tokens times 8, median of 3, one thread, and its ratio to the whole
  vocabulary's, measured in the same run.

Usage: `python bench/vocabulary.py`.

Measured 2026-12-02 on the 2-core machine (a learner-local build beside it), learn_offline's
64 train tasks (json_tree, csv_agg):

| BPE tokens | vocabulary | tokens per task | vs whole | output layer share | fwd+bwd s (8 tasks) | vs whole |
| --- | --- | --- | --- | --- | --- | --- |
| Qwen3's 151,643 | 151,669 | 474 | 1.00x | 99% | 13.12 | 1.00x |
| 32,768 | 32,794 | 498 | 1.05x | 94% | 2.59 | 0.20x |
| 16,384 | 16,410 | 514 | 1.09x | 90% | 1.37 | 0.10x |
| 8,192 | 8,218 | 558 | 1.18x | 81% | 0.98 | 0.07x |
| 4,096 | 4,122 | 627 | 1.32x | 68% | 0.85 | 0.07x |
| 2,048 | 2,074 | 708 | 1.49x | 52% | 0.80 | 0.06x |

8,192 (the recipe's) is the knee: a pass costs 0.07x the whole vocabulary's for 1.18x the
tokens; halving it again saves a tenth of a pass and adds 12% more tokens to sample.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = (None, 32768, 16384, 8192, 4096, 2048)


def task_texts() -> list[str]:
    from piexp.config.compose import load
    from piexp.env.splits import build_splits

    config = load(["experiment=learn_offline"])
    refs = ROOT / "piexp" / "tasks" / "families" / "refs"
    texts = []
    for task in build_splits(config).train:
        files = "\n".join(f"{name}\n{content}" for name, content in sorted(task.files.items()))
        texts.append(f"{task.instruction}\n{files}\n{(refs / f'{task.family}.py').read_text()}")
    return texts


def pass_seconds(size: int | None, tokens: int) -> float:
    import dataclasses

    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from piexp.pretrain.recipe import LearnerRecipe

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = dataclasses.replace(LearnerRecipe(), bpe_tokens=size).model_config()
    model = AutoModelForCausalLM.from_config(Qwen3Config(**config), dtype=torch.float32)
    ids = torch.randint(0, config["vocab_size"], (1, tokens))
    times = []
    for _ in range(3):
        started = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        times.append(time.perf_counter() - started)
        model.zero_grad(set_to_none=True)
    return statistics.median(times)


def main() -> None:
    from transformers import PreTrainedTokenizerFast

    from piexp.pretrain.recipe import LearnerRecipe
    from piexp.tokenizer import offline_qwen3_tokenizer_dir

    texts = task_texts()
    architecture = LearnerRecipe().model_config()
    hidden = architecture["hidden_size"]
    layers = architecture["num_hidden_layers"]
    # Non-embedding multiply-adds per token: attention projections and the MLP.
    heads, kv, head_dim, mlp = (
        architecture["num_attention_heads"],
        architecture["num_key_value_heads"],
        architecture["head_dim"],
        architecture["intermediate_size"],
    )
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * mlp
    rows = []
    base_tokens = base_seconds = 0.0
    for size in SIZES:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(offline_qwen3_tokenizer_dir(size)))
        tokens = statistics.mean(len(tokenizer.encode(text)) for text in texts)
        vocab = len(tokenizer)
        share = hidden * vocab / (hidden * vocab + layers * per_layer)
        if size is None:
            base_tokens = tokens
        seconds = pass_seconds(size, round(8 * tokens))
        if size is None:
            base_seconds = seconds
        rows.append((size, vocab, tokens, tokens / base_tokens, share, seconds, seconds / base_seconds))
    print(f"learn_offline train tasks: {len(texts)}; learner: hidden {hidden}, {layers} layers")
    print(
        "| BPE tokens | vocabulary | tokens per task | vs whole | output layer share | fwd+bwd s (8 tasks) | vs whole |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size, vocab, tokens, ratio, share, seconds, speed in rows:
        name = "Qwen3's 151,643" if size is None else f"{size:,}"
        print(f"| {name} | {vocab:,} | {tokens:.0f} | {ratio:.2f}x | {share:.0%} | {seconds:.2f} | {speed:.2f}x |")


if __name__ == "__main__":
    main()
