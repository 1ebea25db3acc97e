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

Usage: `python bench/vocabulary.py [--sizes=N,N,...]` (by default 32768, 16384, 8192, 4096, 2048).

How to read it: the knee is where a pass stops getting much cheaper while the tokens per
task keep rising; the recipe's size (LearnerRecipe.bpe_tokens, 8,192) was chosen there.
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


def main(argv: list[str]) -> None:
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
    # `--sizes=N,N`: the BPE sizes measured (the whole vocabulary, the baseline, always is).
    chosen = [arg.removeprefix("--sizes=") for arg in argv if arg.startswith("--sizes=")]
    sizes = (None, *(int(n) for n in chosen[0].split(","))) if chosen else SIZES
    rows = []
    base_tokens = base_seconds = 0.0
    for size in sizes:
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
    cells = []
    for size, vocab, tokens, ratio, share, seconds, speed in rows:
        name = "Qwen3's 151,643" if size is None else f"{size:,}"
        cells.append(
            [name, f"{vocab:,}", f"{tokens:.0f}", f"{ratio:.2f}x", f"{share:.0%}", f"{seconds:.2f}", f"{speed:.2f}x"]
        )
        print("| " + " | ".join(cells[-1]) + " |")
    from record import record

    columns = ["BPE tokens", "vocabulary", "tokens per task", "vs whole", "output layer share", "fwd+bwd s (8 tasks)"]
    title = f"learn_offline's {len(texts)} train tasks; learner: hidden {hidden}, {layers} layers"
    record(__file__, [{"title": title, "columns": [*columns, "vs whole"], "rows": cells}])


if __name__ == "__main__":
    main(sys.argv[1:])
