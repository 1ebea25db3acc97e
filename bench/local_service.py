"""service=local figures: set-up time, server start time, seconds per supervised (SFT)
step and per RL iteration with tokens trained per second, the floor (the same model's
bare forward+backward on the same sequences, in one process, no HTTP), peak memory.
Model tiny-local, arith/Python Pi workspace, CPU; the README's example run
(`warm_start.sft_steps=2`, default family) plus 2 short RL iterations (TRAIN).

* set-up: creating the SkyRL server venv (measured now if it does not exist, else the
  time recorded in its stamp when it was created) and building the tiny model;
* server start: launch to first healthy answer, median of 3 cold starts;
* SFT step: `seconds` of each step in the run's warm_start.json (step 0 includes JAX
  compilation), with tokens trained per second (all tokens of all sequences);
* RL iteration: `time/total` of each iteration in metrics.jsonl (the first includes
  compilation), with the sampling and training parts where the cookbook logs them;
* floor: the oracle warm-start sequences of the same run (same tasks, same seed),
  through skyrl's backend in one server-venv process with piexp's speed-ups and the
  server's allocator, second call (compiled), no server, no HTTP;
* peak memory: the highest sum of resident set sizes of the client (the piexp process)
  and the server (API server + engine), sampled every 0.5 s during that run.

Usage: `python bench/local_service.py`.

How to read it: the last SFT step over the floor is what the server adds to the model's
own math (target at most 3); the floor runs skyrl's backend with piexp's speed-ups, so
it is not what the math could cost at best. Step 0 and RL iteration 0 include JAX
compilation: the server keeps compiled programs in `~/.cache/piexp/jax-compilation-cache`
(local_server.py; bounded at 4 GB, file-locked so concurrent servers share it), so only a
machine's first run with a model and shapes pays. With tiny-local's `qwen3` renderer, which
drops each earlier turn's think block from the history, each turn of the warm start's
episodes is a sequence of its own (piexp.env.sampled_context). Where one engine call's
time goes, and what each engine patch saves, is measured apart: bench/sample_call.py,
bench/untrained_lora.py, bench/allocator.py.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

# The README's example (default family: its warm start is the README's), then 2 RL
# iterations of 4 groups x 4 with 4 turns of at most 512 tokens (the oracle's longest
# action is ~450 tokens; at the default 2,048 an untrained model's turns all run to it).
TRAIN = [
    "service=local", "model=tiny-local", "family=arith", "lang=python", "warm_start.sft_steps=2",
    "mode.max_steps=2", "mode.groups_per_batch=4", "limits.max_turns=4", "limits.max_generation_tokens=512",
    "mode.save_every=0", "mode.eval_every=0", "mode.preflight=false",
]  # fmt: skip

#: Run in the server venv: skyrl's backend with piexp's speed-ups, forward_backward twice
#: on the given sequences (cross_entropy), the second call timed.
FLOOR = r"""
import json, time
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types
config = json.loads(sys.argv[3])
backend = JaxBackendImpl(sys.argv[2], JaxBackendConfig(**config), 0)
backend.create_model("m", types.LoraConfig(rank=8, alpha=32.0, seed=0))
data = json.load(open(sys.argv[4]))
n = len(data)
batch = types.PreparedModelPassBatch(
    all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=d["tokens"])]) for d in data],
    all_targets=[d["targets"] for d in data], all_token_weights=[d["weights"] for d in data],
    all_sampling_logprobs=[[0.0] * len(d["tokens"]) for d in data],
    all_advantages=[[0.0] * len(d["tokens"]) for d in data], all_values=[[] for _ in data],
    all_returns=[[] for _ in data], all_model_ids=["m"] * n, all_loss_fns=["cross_entropy"] * n,
    all_loss_fn_configs=[None] * n, request_batch_slices=[("r", "m", 0, n)])
times = []
for _ in range(2):
    started = time.perf_counter()
    backend.forward_backward(batch)
    times.append(time.perf_counter() - started)
print("FLOOR " + json.dumps(times))
"""


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_rss_kb(root_pid: int, marker: str) -> int:
    """RSS of the client process plus every process whose command line names the run
    folder (the server's launcher processes)."""
    total = _rss_kb(root_pid)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == root_pid:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"piexp_skyrl_launcher" in cmdline and marker.encode() in cmdline:
            total += _rss_kb(int(entry.name))
    return total


def _oracle_sequences(path: Path) -> int:
    """The warm start's SFT sequences for TRAIN (same tasks, seed and renderer), as JSON
    at ``path``; returns their token count."""
    import asyncio

    from piexp.config.argv import rewrite_list_overrides
    from piexp.config.compose import load
    from piexp.launch.sandbox import run_sandbox
    from piexp.launch.warm_start import _sft_datums, oracle_trajectories
    from piexp.service import _model_name, _resolved

    config = load(rewrite_list_overrides(TRAIN))
    config = _resolved(config, "", _model_name(config))
    with run_sandbox(config.sandbox) as sandbox_url:
        trajectories, _ = asyncio.run(oracle_trajectories(config, sandbox_url))
    data = [
        {"tokens": datum.model_input.to_ints(), "targets": datum.loss_fn_inputs["target_tokens"].tolist(),
         "weights": datum.loss_fn_inputs["weights"].tolist()}
        for datum in _sft_datums(trajectories)
    ]  # fmt: skip
    path.write_text(json.dumps(data), encoding="utf-8")
    return sum(len(d["tokens"]) for d in data)


def _floor_seconds(venv: Path, model: Path, sequences: Path) -> float:
    """FLOOR's compiled forward+backward time on ``sequences``, with the server's own
    backend settings."""
    from piexp.allocator import allocator_env
    from piexp.service.compat import run_server_script
    from piexp.service.local_server import LocalServer
    from piexp.service.local_venv import venv_python

    server = LocalServer(python=venv_python(venv), base_model=str(model), state_dir=sequences.parent)
    config = {**server.backend_config(), "max_lora_rank": 8}
    figures = run_server_script(
        FLOOR, [str(model), json.dumps(config), str(sequences)], tag="FLOOR", python=venv_python(venv),
        patches=("needed_logprobs", "lora_matmuls", "blocked_attention", "untrained_lora"),
        env={**os.environ, "JAX_PLATFORMS": "cpu", **allocator_env()[0]},
    )  # fmt: skip
    return float(figures[-1])


def main() -> int:
    from piexp.service.local_server import LocalServer
    from piexp.service.local_venv import (
        STAMP,
        ensure_server_venv,
        server_venv_dir,
        venv_python,
    )
    from piexp.service.tiny_model import ensure_tiny_model

    console = Console()
    rows: list[tuple[str, str]] = []

    existed = (server_venv_dir() / STAMP).is_file()
    started = time.perf_counter()
    venv = ensure_server_venv()
    if existed:
        created = json.loads((venv / STAMP).read_text()).get("created_s")
        rows.append(("server venv creation (recorded at creation)", f"{created} s" if created else "unknown"))
    else:
        rows.append(("server venv creation (now)", f"{time.perf_counter() - started:.1f} s"))
    size = subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True).stdout.split()[0]
    rows.append(("server venv size", f"{size} MB"))

    started = time.perf_counter()
    model = ensure_tiny_model()
    rows.append(("tiny model (build or cache hit)", f"{time.perf_counter() - started:.1f} s"))

    starts = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as state:
            server = LocalServer(python=venv_python(venv), base_model=str(model), state_dir=Path(state))
            with server:
                starts.append(server.start_s or 0.0)
    rows.append(("server start (median of 3)", f"{statistics.median(starts):.1f} s"))

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
        began = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "piexp", *TRAIN, f"hydra.run.dir={run_dir}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        peak = [0]

        def sample() -> None:
            while process.poll() is None:
                peak[0] = max(peak[0], _tree_rss_kb(process.pid, str(run_dir)))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, stderr = process.communicate()
        sampler.join(2)
        wall = time.perf_counter() - began
        if process.returncode != 0:
            console.print(stderr[-4000:])
            return 1
        metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        warm = json.loads((run_dir / "warm_start.json").read_text())
        rows.append(("run wall time (server start, check off, 2 SFT steps, 2 RL iterations)", f"{wall:.1f} s"))
        rows.append(("SFT sequences x tokens (all)", f"{warm['datums']} sequences, {warm['tokens']} tokens"))
        for step in warm["steps"]:
            label = "SFT step 0 (includes JAX compilation)" if step["step"] == 0 else f"SFT step {step['step']}"
            rows.append((label, f"{step['seconds']:.1f} s ({step['tokens_per_s']:.0f} tokens/s)"))
        for row in metrics:
            if "time/total" not in row:
                continue
            parts = ", ".join(f"{key.removeprefix('time/')} {row[key]:.0f} s"
                              for key in ("time/sampling", "time/train_step") if key in row)  # fmt: skip
            rows.append((f"RL iteration {row.get('step', '?')}", f"{row['time/total']:.1f} s ({parts})"))
        rows.append(("peak RSS, client + server", f"{peak[0] / 1024:.0f} MB"))

        sequences = Path(tmp) / "sequences.json"
        tokens = _oracle_sequences(sequences)
        floor = _floor_seconds(venv, model, sequences)
        rows.append(("floor: bare forward+backward, same sequences (compiled)",
                     f"{floor:.1f} s ({tokens / floor:.0f} tokens/s)"))  # fmt: skip
        last = warm["steps"][-1]["seconds"]
        rows.append(("last SFT step / floor (target <= 3)", f"{last / floor:.2f}"))

    table = Table(title="service=local (SkyRL 0.4.0, JAX on CPU, tiny-local, README example + 2 RL iterations)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    from record import record

    record(__file__, [table])
    return 0


if __name__ == "__main__":
    sys.exit(main())
