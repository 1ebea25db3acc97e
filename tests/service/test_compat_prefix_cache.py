"""The local server's prefix cache (piexp/service/compat/, item 12) continues a prompt from
the keys and values it kept of an earlier one and samples what a full prefill samples: in
skyrl's own JAX backend, on the tiny model, a second turn (the first turn's prompt, its
greedy continuation and new tokens) and a prompt that shares only the first turns' long
opening are prefilled from what they follow, and their greedy tokens, log-probs and seeded
draws are those of a full prefill by the same program and by skyrl's own generate; the
first turn (nothing kept yet) is skyrl's to the bit; a change of weights drops every
kept prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHECK = r"""
import json
import numpy as np
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types
from skyrl.tx.utils import generator

skyrl_generate = generator.GeneratorMixin.generate
cache = launcher._prefix_kv_cache()
out = {}
backend = JaxBackendImpl(sys.argv[2], JaxBackendConfig(max_lora_adapters=2, max_lora_rank=8), 0)
rng = np.random.default_rng(0)
def tokens(n):
    return [int(t) for t in rng.integers(0, 150000, n)]
opening = tokens(200)  # a system prompt every episode shares
first = [opening + tokens(n) for n in (40, 90)]
def batch(prompts, max_tokens, temperature):
    n = len(prompts)
    return types.PreparedSampleBatch(
        all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=p)]) for p in prompts],
        all_sampling_params=[types.SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=i) for i in range(n)],
        all_model_ids=[""] * n, all_checkpoint_ids=[""] * n, all_checkpoint_paths=[""] * n,
        all_session_ids=[None] * n, needs_prompt_logprobs=False,
        request_batch_slices=[(f"r{i}", "", i, i + 1, False, 0) for i in range(n)])
def sample(prompts, max_tokens, temperature):
    result = backend.sample(batch(prompts, max_tokens, temperature))
    return [[result[f"r{i}"].sequences[0].tokens, result[f"r{i}"].sequences[0].logprobs] for i in range(len(prompts))]
def by_skyrl(prompts, max_tokens, temperature):
    generator.GeneratorMixin.generate = skyrl_generate
    try:
        return sample(prompts, max_tokens, temperature)
    finally:
        generator.GeneratorMixin.generate = patched_generate
patched_generate = generator.GeneratorMixin.generate
out["first"] = sample(first, 16, 0.0)
out["first_skyrl"] = by_skyrl(first, 16, 0.0)
out["kept_after_first"] = len(cache.entries)
# Second turns: each first prompt, its continuation and a tool result; and a new episode
# that shares only the opening.
second = [p + t + tokens(50) for p, (t, _) in zip(first, out["first"])] + [opening + tokens(30)]
for temperature in (0.0, 1.0):
    cache.clear()
    sample(first, 16, 0.0)
    before = (cache.hits, cache.reused, cache.prefilled)
    out[f"continued_{temperature}"] = sample(second, 16, temperature)
    out[f"reused_{temperature}"] = [cache.hits - before[0], cache.reused - before[1], cache.prefilled - before[2]]
    kept_continued = {tuple(e[1].tolist()): e for e in cache.entries}
    cache.clear()
    out[f"full_{temperature}"] = sample(second, 16, temperature)
    kept_full = {tuple(e[1].tolist()): e for e in cache.entries}
    # The keys and values of each second turn: kept after the continued and the full prefill.
    out[f"kv_gap_{temperature}"] = max(
        float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
        for key in kept_full for a, b in zip(kept_continued[key][2] + kept_continued[key][3], kept_full[key][2] + kept_full[key][3])
    )
    out[f"skyrl_{temperature}"] = by_skyrl(second, 16, temperature)
out["second_lengths"] = [len(p) for p in second]
out["first_lengths"] = [len(p) + len(t) for p, (t, _) in zip(first, out["first"])]
sample(first, 4, 0.0)
out["kept_before_weights"] = len(cache.entries)
backend.create_model("m", types.LoraConfig(rank=8, alpha=8.0, seed=0))
out["kept_after_weights"] = len(cache.entries)
print("RESULT " + json.dumps(out))
"""


def test_continued_prefills_sample_what_full_prefills_sample(run_backend_script, tmp_path: Path):
    """Slow: the tiny model samples in skyrl's JAX backend (JAX compiles each program shape on
    CPU: full and continued prefills, skyrl's generate)."""
    from piexp.service.compat import write_launcher

    launcher = write_launcher(tmp_path)
    out = run_backend_script(
        CHECK, launcher, "patched", "_skip_untrained_lora,_cpu_sampling_speedups,_prompt_logprobs_per_token"
    )
    # Nothing kept yet: the same program as skyrl's, to the bit.
    assert out["first"] == out["first_skyrl"]
    assert [len(t) for t, _ in out["first"]] == [16, 16]
    assert out["kept_after_first"] >= 2
    for temperature in ("0.0", "1.0"):
        hits, reused, prefilled = out[f"reused_{temperature}"]
        # Rows 0 and 1 continue their first turns, row 2 the opening (the batch of 3 is
        # padded to 4 with a copy of row 0).
        assert hits == 4
        assert reused == 2 * out["first_lengths"][0] + out["first_lengths"][1] + 200
        assert prefilled == sum(out["second_lengths"]) + out["second_lengths"][0] - reused
        continued, full, skyrl = (out[f"{k}_{temperature}"] for k in ("continued", "full", "skyrl"))
        assert full == skyrl  # the full prefill is skyrl's
        for row, ((tokens, logprobs), (full_tokens, full_logprobs)) in enumerate(zip(continued, full)):
            assert len(tokens) == 16
            assert tokens == full_tokens, (temperature, row)
            assert logprobs == pytest.approx(full_logprobs, abs=1e-5), (temperature, row)
        # The kept keys and values of each second turn, relative to their largest: 3e-7
        # here; 3e-4 when a continued prefill's query also sees the key after its own.
        assert out[f"kv_gap_{temperature}"] < 1e-5
    assert out["kept_before_weights"] > 0
    assert out["kept_after_weights"] == 0
