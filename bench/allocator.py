"""What tcmalloc (piexp.allocator) saves the processes piexp starts to compute, against
glibc's malloc measured in the same run, each way in fresh processes:

1. the local SkyRL server's engine (`service.tcmalloc`): its own calls on
   `model=learner-local`, in the server venv with every engine patch the server applies
   (piexp/service/compat/), no HTTP:
   * sample: 8 prompts of 1,200 tokens (padded to 1,536), 160 new tokens each at
     temperature 1 (an RL step's and an eval's typical batch);
   * score: the prompt log-probs of one 1,800-token sequence (the KL penalty's call,
     one per episode);
   * train: one forward_backward of 4 sequences of 1,400-2,000 tokens, importance
     sampling with advantages on a few spans (an RL batch; the server runs one sequence
     at a time);
   each the median seconds of `--repeats` calls after one that compiles (the compilation
   cache is shared, so both ways load the same programs), with the process's user and
   system CPU over those calls;
2. the learner build's fit (piexp/pretrain/fit_process.py), in piexp's venv: `--steps`
   steps of piexp.pretrain.training.fit at a late step's shapes (3 episodes of 1,140
   tokens, 6 whole answer turns of 1,700, 16 answer windows of 80; random tokens, the
   recipe's model), seconds a step over the whole fit and its CPU.

The two ways alternate, `--rounds` processes each. The values are compared bit for bit
(sampled tokens, their log-probs, prompt log-probs, losses and per-token log-probs; the
fit's per-step losses and held-out figures): the bench fails if the allocator changed
any.

Usage: `python bench/allocator.py [--repeats=3] [--rounds=2] [--steps=12]` (builds
learner-local first if this machine has no build of its sources).

How to read it: the ratio is tcmalloc's seconds over glibc's; "same values" must say yes.
Where the saving comes from shows in the CPU columns: the user CPU is about the same both
ways, and tcmalloc takes away the kernel's part, the page faults of buffers glibc's
malloc unmaps after each call (its mmap threshold is at most 32 MB; XLA's attention
scores, KV caches and logits are tens to hundreds of MB). End-to-end runs with and
without it can differ in the last bits of some figures: the engine batches whatever
requests are pending, so a faster engine batches others together, a matter of the
server's timing, not of the allocator's values.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ENGINE = r"""
import hashlib, json, resource, time
import numpy as np
launcher.engine_patches()
import jax.numpy as jnp
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types
from skyrl.tx.utils.models import round_up_seq_len

model_dir, config, repeats = sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
vocab = json.load(open(model_dir + "/config.json"))["vocab_size"]
backend = JaxBackendImpl(model_dir, JaxBackendConfig(**config), 0)
backend.create_model("m", types.LoraConfig(rank=8, alpha=32.0, seed=0))
adapter = backend.models["m"].adapter_index
rng = np.random.default_rng(0)


def generate(batch, length, new_tokens, prompt_logprobs):
    padded = round_up_seq_len(length)
    ids = np.zeros((batch, padded), np.int32)
    ids[:, :length] = rng.integers(0, vocab - 26, (batch, length))
    mask = np.zeros((batch, padded), np.int32)
    mask[:, :length] = 1
    params = [types.SamplingParams(temperature=1.0, max_tokens=new_tokens, seed=i, stop_tokens=[]) for i in range(batch)]

    def call():
        out = backend.model.generate(jnp.asarray(ids), jnp.asarray(mask), sampling_params=params,
                                     adapter_indices=jnp.full((batch,), adapter, jnp.int32),
                                     prompt_logprobs=prompt_logprobs)
        values = [out.generated_ids, out.logprobs, out.prompt_logprobs]
        return json.dumps(values).encode()
    return call


def train(lengths):
    ids = [[int(t) for t in rng.integers(0, vocab - 26, n)] for n in lengths]
    spans = [[1.0 if (i % 400) >= 320 else 0.0 for i in range(n)] for n in lengths]
    batch = types.PreparedModelPassBatch(
        all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=s)]) for s in ids],
        all_targets=ids, all_token_weights=[[1.0] * n for n in lengths],
        all_sampling_logprobs=[[-9.0 * s for s in span] for span in spans],
        all_advantages=[[0.5 * s for s in span] for span in spans], all_values=[[] for _ in ids],
        all_returns=[[] for _ in ids], all_model_ids=["m"] * len(ids), all_loss_fns=["importance_sampling"] * len(ids),
        all_loss_fn_configs=[None] * len(ids), request_batch_slices=[("r", "m", 0, len(ids))])

    def call():
        outputs = backend.forward_backward(batch)["r"].loss_fn_outputs
        return json.dumps([[o["logprobs"]["data"], o["elementwise_loss"]["data"]] for o in outputs]).encode()
    return call


calls = {"sample": generate(8, 1200, 160, False), "score": generate(1, 1800, 1, True),
         "train": train((1400, 2000, 1700, 1600))}
figures = {}
for name, call in calls.items():
    first = call()
    walls, values = [], hashlib.sha256(first)
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(repeats):
        started = time.perf_counter()
        values.update(call())
        walls.append(time.perf_counter() - started)
    after = resource.getrusage(resource.RUSAGE_SELF)
    figures[name] = {"walls": walls, "user": (after.ru_utime - before.ru_utime) / repeats,
                     "sys": (after.ru_stime - before.ru_stime) / repeats, "values": values.hexdigest()}
print("FIGURES " + json.dumps(figures))
"""

FIT = r"""
import dataclasses, hashlib, json, random, resource, sys, time
import torch
from transformers import AutoModelForCausalLM, Qwen3Config
from piexp.pretrain.build import RECIPE
from piexp.pretrain.data import TokenSequence
from piexp.pretrain.training import fit

steps = int(sys.argv[1])
rng = random.Random(0)
vocab = RECIPE.model_config()["vocab_size"] - 26


def sequences(count, length, weighted):
    made = []
    for i in range(count):
        tokens = [rng.randrange(vocab) for _ in range(length + 1)]
        weights = [float(rng.random() < weighted) for _ in range(length)]
        made.append(TokenSequence("oracle", 1.0, i, tokens[:-1], tokens[1:], weights, "f"))
    return made


mix, whole, windows = sequences(12, 1140, 0.09), sequences(12, 1700, 0.01), sequences(64, 80, 0.2)
recipe = dataclasses.replace(RECIPE, steps=steps, whole_turns_from_step=0)
torch.manual_seed(recipe.seed)
model = AutoModelForCausalLM.from_config(Qwen3Config(**recipe.model_config()), dtype=torch.float32)
before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
report = fit(model, mix, mix[:2], recipe, None, windows, whole[:2], whole)
wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
values = hashlib.sha256(json.dumps(dataclasses.asdict(report)["step_losses"] + [report.heldout_nll]).encode())
print("FIGURES " + json.dumps({"fit step": {"walls": [wall / steps], "user": (after.ru_utime - before.ru_utime) / steps,
                               "sys": (after.ru_stime - before.ru_stime) / steps, "values": values.hexdigest()}}))
"""

WAYS = ("glibc malloc", "tcmalloc")


def _allocator(way: str) -> dict[str, str]:
    """The environment that makes a process allocate with ``way``."""
    from piexp.allocator import allocator_env

    preload, allocator = allocator_env(way == "tcmalloc")
    if allocator != way:
        raise SystemExit(f"{way} is not installed here (apt-get install libtcmalloc-minimal4)")
    return preload


def _engine(way: str, python: Path, launcher: Path, model: Path, repeats: int) -> dict:
    from piexp.service.compat import ServerScriptError, run_server_script
    from piexp.service.local_server import LocalServer, compilation_cache_env, default_compilation_cache_dir

    config = LocalServer(python=python, base_model=str(model), state_dir=launcher.parent).backend_config()
    try:
        return run_server_script(
            ENGINE, [str(model), json.dumps(config), str(repeats)], tag="FIGURES", python=python, launcher=launcher,
            env={**compilation_cache_env(default_compilation_cache_dir()), **_allocator(way)},
        )  # fmt: skip
    except ServerScriptError as error:
        raise SystemExit(f"the {way} process failed: {error}") from None


def _fit(way: str, steps: int) -> dict:
    # piexp's own venv, from this checkout (the bench's folder's parent).
    env = {"JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": os.environ["PATH"],
           "PYTHONPATH": str(Path(__file__).parents[1]), **_allocator(way)}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", FIT, str(steps)], capture_output=True, text=True, env=env, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"the {way} process failed:\n{result.stderr[-3000:]}")
    line = next(line for line in result.stdout.splitlines() if line.startswith("FIGURES "))
    return json.loads(line.removeprefix("FIGURES "))


def main(argv: list[str]) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from piexp.launch.sandbox import run_sandbox
    from piexp.pretrain.build import data_config, ensure_learner_model
    from piexp.service.compat import write_launcher
    from piexp.service.local_venv import ensure_server_venv, venv_python

    options = dict(arg.removeprefix("--").split("=", 1) for arg in argv)
    repeats, rounds, steps = (int(options.get(k, d)) for k, d in (("repeats", 3), ("rounds", 2), ("steps", 12)))
    console = Console()
    model = ensure_learner_model(lambda: run_sandbox(data_config().sandbox))
    python = venv_python(ensure_server_venv())
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as scratch, Progress(console=console) as progress:
        launcher = write_launcher(Path(scratch))
        task = progress.add_task("processes, each way in turn", total=rounds * len(WAYS))
        for round_ in range(rounds):
            for way in WAYS if round_ % 2 == 0 else WAYS[::-1]:  # alternate which goes first
                runs[way].append({**_engine(way, python, launcher, model, repeats), **_fit(way, steps)})
                progress.advance(task)
    table = Table(title=f"median s a call or step over {rounds} processes each way (CPU s: user / sys)")
    for column in ("call", *WAYS, "ratio", "same values"):
        table.add_column(column, justify="right" if column != "call" else "left")
    identical = True
    for name in runs[WAYS[0]][0]:
        cells: list[str] = []
        medians: list[float] = []
        digests: set[str] = set()
        for way in WAYS:
            walls = [w for run in runs[way] for w in run[name]["walls"]]
            user = statistics.mean(run[name]["user"] for run in runs[way])
            system = statistics.mean(run[name]["sys"] for run in runs[way])
            medians.append(statistics.median(walls))
            cells.append(f"{medians[-1]:.3f} ({user:.2f} / {system:.2f})")
            digests.update(run[name]["values"] for run in runs[way])
        identical &= len(digests) == 1
        table.add_row(name, *cells, f"{medians[1] / medians[0]:.2f}x", "yes" if len(digests) == 1 else "NO")
    console.print(table)
    if not identical:
        console.print("[red]the allocator changed a computed value[/red]")
    from record import record

    record(__file__, [table], [] if identical else ["the allocator changed a computed value"])
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
