"""Where a sample call of the local server's engine spends its time, on `model=learner-local`:
its prefill (the prompt, padded to skyrl's length bucket) against its decode steps, at the
padded prompt lengths an RL step of `experiment=learn_offline` sends, and what two
other ways of the engine cost, each against the engine as piexp ships it, measured in the
same run:

* as shipped: every engine patch the server applies (piexp/service/compat/), causal
  attention in query blocks of 128 that skip a block in which every row is padding
  (piexp/service/compat/skyrl_server/speedups.py item 3), the KV cache padded to skyrl's bucket of the padded prompt plus `max_tokens`
  (two significant binary digits: 2,048 + 384 -> 3,072);
* query blocks of 512 (`speedups.CAUSAL_QUERY_BLOCK`; prefill and training alike):
  in these batches no block of 512 is all padding, so nothing is skipped;
* a KV cache padded only to the padded prompt plus `max_tokens`, rounded up to 128
  (2,048 + 384 -> 2,432; the decode steps read less of it).

The shipped way and the KV cache way alternate call by call in one process, so they see
the same machine; the query blocks of 512 run in processes of their own, alternating
with those. Each process runs skyrl's backend in the server venv (no HTTP) with a LoRA
adapter of the server's rank active, as an RL step samples: 8 prompts of random tokens
with the lengths of a batch of 8 that an RL run sent, one per bucket (the longest 949,
1,337 and 1,687 tokens, padded on the right to 1,024, 1,536 and 2,048), temperature 1,
no stop token, `max_tokens` 384 (limits.max_generation_tokens of experiment=learn_offline).
Prefill: seconds of a call that samples 1 token; a decode step: (seconds of a call that
samples all 384 - prefill) / 383; "a call": prefill plus 165 steps (the mean longest turn
of the batches of an RL run at 2,048, which decode until that one ends). Each the median
of `--repeats` calls after one that compiles, then the median over a way's processes.
"same tokens" compares the 384 sampled tokens of every row with the shipped way's.

The kinds of process alternate, `--rounds` each. Usage: `python bench/sample_call.py
[--repeats=3] [--rounds=2]` (builds learner-local first if this machine has no build of
its sources).

How to read it: each alternative's ratios are its seconds over the shipped way's; below
1.00x it is faster. On a shared machine a decode step can take twice as long for a minute
at a time, whatever runs: the "each process" column shows such a process, so read
several rounds. "same tokens: no" can be float rounding (a softmax over 128 keys where it
was 512); greedy tokens, log-probs and gradients are checked in tests/service/.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

ENGINE = r"""
import json, statistics, time
import numpy as np
way, model_dir, config, repeats = sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5])
if way == "query blocks of 512":
    launcher.speedups.CAUSAL_QUERY_BLOCK = 512
launcher.engine_patches()
import jax.numpy as jnp
import skyrl.tx.utils.models as models
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types

bucket = models.round_up_seq_len  # the prompt's padding, and the shipped KV cache length
# The generator's only use of models.round_up_seq_len: the KV cache's length.
kv_lengths = {"as shipped": bucket, "KV cache to prompt + max_tokens": lambda length: -(-length // 128) * 128}
ways = list(kv_lengths) if way == "as shipped" else [way]  # the KV ways alternate call by call
vocab = json.load(open(model_dir + "/config.json"))["vocab_size"]
# Prompt lengths of batches of 8 an RL run of experiment=learn_offline sent, one per length
# bucket (its server log; rows are padded on the right to the bucket of the longest).
BATCHES = ([829, 829, 831, 831, 831, 831, 831, 949], [947, 949, 1128, 1128, 1286, 1303, 1337, 1337],
           [829, 829, 1126, 1128, 1559, 1631, 1631, 1687])
backend = JaxBackendImpl(model_dir, JaxBackendConfig(**config), 0)
backend.create_model("m", types.LoraConfig(rank=config["max_lora_rank"], alpha=32.0, seed=0))
adapter = backend.models["m"].adapter_index


def call(kv_way, lengths, new_tokens):
    models.round_up_seq_len = kv_lengths.get(kv_way, bucket)
    longest = max(lengths)
    padded, rng = bucket(longest), np.random.default_rng(longest)  # the same prompts every way
    ids = np.zeros((8, padded), np.int32)
    mask = np.zeros((8, padded), np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(0, vocab - 26, length)
        mask[row, :length] = 1
    params = [types.SamplingParams(temperature=1.0, max_tokens=new_tokens, seed=row, stop_tokens=[]) for row in range(8)]
    started = time.perf_counter()
    out = backend.model.generate(jnp.asarray(ids), jnp.asarray(mask), sampling_params=params,
                                 adapter_indices=jnp.full((8,), adapter, jnp.int32))
    return time.perf_counter() - started, out.generated_ids


figures = {name: {} for name in ways}
for lengths in BATCHES:
    longest = max(lengths)
    seconds = {(name, new): [] for name in ways for new in (1, 384)}
    tokens = {}
    for new_tokens in (1, 384):
        for name in ways:
            call(name, lengths, new_tokens)  # compiles
        for _ in range(repeats):
            for name in ways:
                took, sampled = call(name, lengths, new_tokens)
                seconds[name, new_tokens].append(took)
                if new_tokens == 384:
                    tokens[name] = sampled  # the same every repeat: the same prompts and seeds
    for name in ways:
        prefill, whole = (statistics.median(seconds[name, new]) for new in (1, 384))
        figures[name][str(bucket(longest))] = {"prefill": prefill, "step": (whole - prefill) / 383, "tokens": tokens[name]}
print("FIGURES " + json.dumps(figures))
"""

WAYS = ("as shipped", "query blocks of 512", "KV cache to prompt + max_tokens")
PROCESSES = ("as shipped", "query blocks of 512")  # the first also runs the KV cache way, call by call
TYPICAL_STEPS = 165


def _figures(kind: str, python: Path, launcher: Path, model: Path, repeats: int) -> dict:
    from piexp.allocator import allocator_env
    from piexp.service.compat import ServerScriptError, run_server_script
    from piexp.service.local_server import LocalServer, compilation_cache_env, default_compilation_cache_dir

    config = LocalServer(python=python, base_model=str(model), state_dir=launcher.parent).backend_config()
    preload, _ = allocator_env(True)  # the server's allocator
    try:
        return run_server_script(
            ENGINE, [kind, str(model), json.dumps(config), str(repeats)], tag="FIGURES", python=python, launcher=launcher,
            env={**compilation_cache_env(default_compilation_cache_dir()), **preload},
        )  # fmt: skip
    except ServerScriptError as error:
        raise SystemExit(f"the process of {kind!r} failed: {error}") from None


def main(argv: list[str]) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from piexp.launch.sandbox import run_sandbox
    from piexp.pretrain.build import data_config, ensure_learner_model
    from piexp.service.compat import write_launcher
    from piexp.service.local_venv import ensure_server_venv, venv_python

    options = dict(arg.removeprefix("--").split("=", 1) for arg in argv)
    repeats, rounds = int(options.get("repeats", 3)), int(options.get("rounds", 2))
    console = Console()
    model = ensure_learner_model(lambda: run_sandbox(data_config().sandbox))
    python = venv_python(ensure_server_venv())
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as scratch, Progress(console=console) as progress:
        launcher = write_launcher(Path(scratch))
        task = progress.add_task("processes, each kind in turn", total=rounds * len(PROCESSES))
        for round_ in range(rounds):
            for kind in PROCESSES if round_ % 2 == 0 else PROCESSES[::-1]:  # alternate which goes first
                for way, way_figures in _figures(kind, python, launcher, model, repeats).items():
                    runs[way].append(way_figures)
                progress.advance(task)
    # The median over the processes of each way (in a slow minute of this machine a decode
    # step takes twice as long, whatever the way), and whether every process of a way
    # sampled the shipped way's tokens.
    figures = {
        way: {
            length: {
                "prefill": statistics.median(run[length]["prefill"] for run in way_runs),
                "step": statistics.median(run[length]["step"] for run in way_runs),
                "steps": [run[length]["step"] for run in way_runs],
                "tokens": [run[length]["tokens"] for run in way_runs],
            }
            for length in way_runs[0]
        }
        for way, way_runs in runs.items()
    }
    shipped = figures[WAYS[0]]
    table = Table(
        title=f"a sample call of 8 rows, max_tokens 384 (medians over {rounds} processes a way of the "
        f"median of {repeats} calls); ratios to as shipped"
    )
    for column in ("padded prompt", "prefill s", "decode step ms (each process)", f"a call ({TYPICAL_STEPS} steps) s",
                   *(f"{way}: prefill, step, call, same tokens" for way in WAYS[1:])):  # fmt: skip
        table.add_column(column, justify="right")
    for length, base in shipped.items():
        call = base["prefill"] + TYPICAL_STEPS * base["step"]
        each = ", ".join(f"{1000 * step:.2f}" for step in base["steps"])
        cells = [length, f"{base['prefill']:.3f}", f"{1000 * base['step']:.3f} ({each})", f"{call:.3f}"]
        for way in WAYS[1:]:
            other = figures[way][length]
            other_call = other["prefill"] + TYPICAL_STEPS * other["step"]
            same = "yes" if all(tokens == base["tokens"][0] for tokens in other["tokens"] + base["tokens"]) else "no"
            cells.append(f"{other['prefill'] / base['prefill']:.2f}x, {other['step'] / base['step']:.2f}x, "
                         f"{other_call / call:.2f}x, {same}")  # fmt: skip
        table.add_row(*cells)
    console.print(table)
    from record import record

    record(__file__, [table])
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
