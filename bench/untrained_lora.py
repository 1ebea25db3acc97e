"""What skipping the LoRA of layers no adapter trains (the `untrained_lora` speed-up,
piexp/service/compat/skyrl_server/speedups.py item 4) saves on the local server: seconds per training step
(forward_backward + optim_step, importance_sampling) of skyrl's JAX backend in one
server-venv process, with piexp's speed-ups needed_logprobs, lora_matmuls and
blocked_attention (items 1-3) in both variants and the
skip in one, at LoRA ranks 16 and 64, on one fixed batch: 4 sequences of 1,500 random
tokens, the last 500 of each with an advantage (an RL batch's shape: a long
observation, then the sampled turn). Each variant runs in its own process; the first
step (compilation) is reported apart, the figure is the median of the next three.
Usage: `python bench/untrained_lora.py [MODEL]` (`tiny-local` by default; a model folder,
e.g. the `learner-local` build, otherwise).

How to read it: the ratio is the step with the skip over the step without. skyrl's
create_model never trains the embedding or the unembedding, but both carry a LoRA of the
server's max rank (scaling 0), computed and differentiated at every position; with the
skip the rank of the trained layers is nearly free on a CPU, so compare the two ranks'
"with skip" columns for what a higher rank costs.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

RANKS = (16, 64)

#: Run in the server venv after the launcher's preamble with speed-ups 1-3 applied: argv
#: launcher, model, rank, variant ("plain" or "skip": the untrained_lora speed-up too).
STEP = r"""
import json, time
import numpy as np
if sys.argv[4] == "skip":
    launcher.apply("untrained_lora")
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types
rank = int(sys.argv[3])
backend = JaxBackendImpl(sys.argv[2], JaxBackendConfig(max_lora_adapters=2, max_lora_rank=rank,
                         train_micro_batch_size=1, loss_chunk_size=1024), 0)
backend.create_model("m", types.LoraConfig(rank=rank, alpha=32.0, seed=0))
# Token ids the model's vocabulary holds, below its 26 added (special) tokens.
VOCAB = json.load(open(sys.argv[2] + "/config.json"))["vocab_size"]
ORDINARY_TOKENS = VOCAB - 26
rng = np.random.default_rng(0)
count, length, observed = 4, 1500, 1000
ids = [[int(t) for t in rng.integers(0, ORDINARY_TOKENS, length)] for _ in range(count)]
sampled = [[0.0] * observed + [1.0] * (length - observed) for _ in ids]
batch = types.PreparedModelPassBatch(
    all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=s)]) for s in ids],
    all_targets=ids, all_token_weights=[[1.0] * length for _ in ids],
    all_sampling_logprobs=[[-1.0 * s for s in row] for row in sampled],
    all_advantages=[[0.5 * s for s in row] for row in sampled],
    all_values=[[] for _ in ids], all_returns=[[] for _ in ids], all_model_ids=["m"] * count,
    all_loss_fns=["importance_sampling"] * count, all_loss_fn_configs=[None] * count,
    request_batch_slices=[("r", "m", 0, count)])
adam = types.OptimStepInput(adam_params=types.AdamParams(learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8,
                                                          weight_decay=0.0))
seconds = []
for _ in range(4):
    started = time.perf_counter()
    backend.forward_backward(batch)
    backend.optim_step("m", adam)
    seconds.append(time.perf_counter() - started)
print("RESULT " + json.dumps(seconds))
"""


def step_seconds(python: Path, launcher: Path, model: Path, rank: int, variant: str) -> list[float]:
    from piexp.service.compat import ServerScriptError, run_server_script

    try:
        return run_server_script(
            STEP, [str(model), str(rank), variant], patches=("needed_logprobs", "lora_matmuls", "blocked_attention"),
            python=python, launcher=launcher, timeout_s=900,
        )  # fmt: skip
    except ServerScriptError as error:
        raise SystemExit(f"rank {rank} {variant} failed: {error}") from None


def main() -> int:
    from piexp.service.compat import write_launcher
    from piexp.service.local_venv import ensure_server_venv, venv_python
    from piexp.service.tiny_model import ensure_tiny_model

    console = Console()
    python = venv_python(ensure_server_venv())
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else ensure_tiny_model()
    table = Table(title=f"training step (forward_backward + optim_step) on {model.name}, seconds")
    for column in ("rank", "first, without skip", "without skip", "first, with skip", "with skip", "ratio"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        launcher = write_launcher(Path(tmp))
        for rank in RANKS:
            console.print(f"rank {rank} ...")
            plain = step_seconds(python, launcher, model, rank, "plain")
            skip = step_seconds(python, launcher, model, rank, "skip")
            before, after = statistics.median(plain[1:]), statistics.median(skip[1:])
            table.add_row(
                str(rank),
                f"{plain[0]:.1f}",
                f"{before:.1f}",
                f"{skip[0]:.1f}",
                f"{after:.1f}",
                f"{after / before:.2f}x",
            )
    console.print(table)
    from record import record

    record(__file__, [table])
    return 0


if __name__ == "__main__":
    sys.exit(main())
