"""The sampling speed-ups of the local server
(piexp/service/compat/skyrl_server/speedups.py, items 4-6) sample from the same
distribution and pick the same tokens, and its prompt log-probs (fixes.py, item 2) are
one per prompt token, aligned with them, a batch scored one sequence at a time: in
skyrl's own JAX backend, on the tiny model, greedy decoding of a batch of 3 prompts of
different lengths (padded to a batch of 4 when patched) gives the same tokens and
log-probs with and without them; the two-level categorical draw matches softmax
probabilities spread over block boundaries (total variation distance over 200,000 draws)
and never draws a -inf entry; the replacement argmax agrees with jnp.argmax on rows with
ties and NaNs; the prompt log-probs of a prompt and its greedy continuation end with the
continuation's own log-probs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHECK = r"""
import json
import jax, jax.numpy as jnp, numpy as np
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types
from skyrl.tx.utils import generator

out = {}
backend = JaxBackendImpl(sys.argv[2], JaxBackendConfig(max_lora_adapters=2, max_lora_rank=8), 0)
# Token ids the model's vocabulary holds, below its 26 added (special) tokens.
VOCAB = json.load(open(sys.argv[2] + "/config.json"))["vocab_size"]
ORDINARY_TOKENS = VOCAB - 26
rng = np.random.default_rng(0)
prompts = [[int(t) for t in rng.integers(0, ORDINARY_TOKENS, n)] for n in (40, 90, 65)]
def greedy_batch(prompts, max_tokens, prompt_logprobs, tag):
    # One request per prompt, named tag + its index.
    n = len(prompts)
    return types.PreparedSampleBatch(
        all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=p)]) for p in prompts],
        all_sampling_params=[types.SamplingParams(temperature=0.0, max_tokens=max_tokens, seed=i) for i in range(n)],
        all_model_ids=[""] * n, all_checkpoint_ids=[""] * n, all_checkpoint_paths=[""] * n,
        all_session_ids=[None] * n, needs_prompt_logprobs=prompt_logprobs,
        request_batch_slices=[(f"{tag}{i}", "", i, i + 1, prompt_logprobs, 0) for i in range(n)])
result = backend.sample(greedy_batch(prompts, 12, False, "r"))
out["greedy"] = {k: [v.sequences[0].tokens, v.sequences[0].logprobs] for k, v in result.items()}
# The prompt log-probs of prompt 0 followed by its greedy continuation: entry i is
# log p(token i | tokens before i), so the last 12 are the continuation's own log-probs.
full = prompts[0] + result["r0"].sequences[0].tokens
# Scored in one batch with prompt 1 (patched: one sequence at a time).
scored = greedy_batch([full, prompts[1]], 1, True, "s")
batches = []
generate = generator.GeneratorMixin.generate
def counted(self, input_ids, *args, **kwargs):
    batches.append(int(input_ids.shape[0]))
    return generate(self, input_ids, *args, **kwargs)
generator.GeneratorMixin.generate = counted
scores = backend.sample(scored)
out["scored_batches"] = batches
out["prompt_logprobs"] = [scores["s0"].prompt_logprobs, scores["s1"].prompt_logprobs]
out["scored_lengths"] = [len(full), len(prompts[1])]
if sys.argv[3] == "patched":
    # 40 entries with mass, around block edges (1,024 per block) and at the end; the rest
    # ~e^-30 each, and a stretch at -inf that must never be drawn.
    size = 5000
    support = sorted({0, 1, 1022, 1023, 1024, 1025, 2047, 2048, 4097, 4999, *rng.integers(0, size, 30).tolist()})
    logits = np.full(size, -30.0, np.float32)
    logits[3000:3100] = -np.inf
    logits[support] = rng.normal(0, 1, len(support))
    draw = jax.jit(jax.vmap(lambda key: generator.jax.random.categorical(key, jnp.asarray(logits), axis=-1)))
    draws = np.asarray(draw(jax.random.split(jax.random.PRNGKey(1), 200_000)))
    expected = np.exp(logits - logits.max()); expected /= expected.sum()
    counts = np.bincount(draws, minlength=size) / len(draws)
    out["tv"] = float(0.5 * np.abs(counts - expected).sum())
    out["outside_support"] = int(np.isin(draws, support, invert=True).sum())
    rows = rng.normal(size=(8, 151936)).astype(np.float32)
    rows[1, [5, 70000, 151935]] = 99.0  # ties: the first wins
    rows[2, 900] = np.nan  # NaN counts as the maximum
    rows[3, [17, 23]] = np.nan
    ours = generator.jnp.argmax(jnp.asarray(rows), axis=-1)
    out["argmax_equal"] = bool((np.asarray(ours) == np.asarray(jnp.argmax(jnp.asarray(rows), axis=-1))).all())
print("RESULT " + json.dumps(out))
"""


def test_sampling_speedups_keep_tokens_and_distribution(run_backend_script, tmp_path: Path):
    """Slow: the tiny model decodes in skyrl's JAX backend twice (JAX compiles on CPU each
    time), with and without the speed-ups, then 200,000 categorical draws."""
    from piexp.service.compat import write_launcher

    launcher = write_launcher(tmp_path)
    plain = run_backend_script(CHECK, launcher, "plain", "sampling_draws,power_of_two_batches")
    patched = run_backend_script(
        CHECK, launcher, "patched", "untrained_lora,sampling_draws,power_of_two_batches,prompt_logprobs_per_token"
    )
    assert sorted(patched["greedy"]) == sorted(plain["greedy"]) == ["r0", "r1", "r2"]
    for request, (tokens, logprobs) in plain["greedy"].items():
        assert len(tokens) == 12
        assert patched["greedy"][request][0] == tokens, request
        assert patched["greedy"][request][1] == pytest.approx(logprobs, abs=1e-4), request
    # Sampling noise alone gives ~0.006 here; a draw off by one entry or uniform within a
    # block gives far more.
    assert patched["tv"] < 0.02
    assert patched["outside_support"] == 0
    assert patched["argmax_equal"]
    # Item 11: one prompt log-prob per prompt token, None for the first, aligned with the
    # tokens (skyrl alone gives the n - 1 defined ones: a reader indexing by token is one off).
    for ours, skyrls, length in zip(patched["prompt_logprobs"], plain["prompt_logprobs"], patched["scored_lengths"]):
        assert len(skyrls) == length - 1
        assert len(ours) == length
        assert ours[0] is None
        assert ours[1:] == pytest.approx(skyrls, abs=1e-4)
    assert plain["scored_batches"] == [2]
    assert patched["scored_batches"] == [1, 1]
    assert patched["prompt_logprobs"][0][-12:] == pytest.approx(plain["greedy"]["r0"][1], abs=1e-3)
