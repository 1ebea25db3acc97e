"""The local server's losses are Tinker's sums over a datum's tokens (piexp/service/compat/
skyrl_server/fixes.py, item 1): in skyrl's own JAX backend, on the tiny model, two RL
datums over the same tokens whose advantages cancel (+1 and -1 on the same span) but
whose lengths differ (the second carries more observation after the span) give no
gradient at all, as `-(ratio * advantages).sum()` does; skyrl 0.4.0 alone weighs each
datum by one over its length, so the pair pushes the span one way. A datum alone trains,
and the per-token losses and log-probs a client receives are the same with and without
the item."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHECK = r"""
import json
import numpy as np
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types

backend = JaxBackendImpl(sys.argv[2], JaxBackendConfig(max_lora_adapters=3, max_lora_rank=8,
                         train_micro_batch_size=2, loss_chunk_size=128), 0)
backend.create_model("m", types.LoraConfig(rank=8, alpha=32.0, seed=0))
# Token ids the model's vocabulary holds, below its 26 added (special) tokens.
VOCAB = json.load(open(sys.argv[2] + "/config.json"))["vocab_size"]
ORDINARY_TOKENS = VOCAB - 26
UNIFORM_LOGPROB = float(np.log(VOCAB))  # a sampled token's log-prob under a uniform model
rng = np.random.default_rng(0)
shared = [int(t) for t in rng.integers(0, ORDINARY_TOKENS, 300)]
longer = shared + [int(t) for t in rng.integers(0, ORDINARY_TOKENS, 500)]  # more observation after the span
span = [1.0 if 100 <= i < 160 else 0.0 for i in range(len(longer))]
out = {}
for name, signs in (("cancelling pair", (1.0, -1.0)), ("one datum", (1.0, 0.0))):
    ids = [shared, longer]
    advantages = [[sign * s for s in span[: len(seq)]] for sign, seq in zip(signs, ids)]
    sampled = [[-UNIFORM_LOGPROB * s for s in span[: len(seq)]] for seq in ids]
    batch = types.PreparedModelPassBatch(
        all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=s)]) for s in ids],
        all_targets=ids, all_token_weights=[[1.0] * len(s) for s in ids], all_sampling_logprobs=sampled,
        all_advantages=advantages, all_values=[[] for _ in ids], all_returns=[[] for _ in ids],
        all_model_ids=["m"] * 2, all_loss_fns=["importance_sampling"] * 2, all_loss_fn_configs=[None] * 2,
        request_batch_slices=[("r", "m", 0, 2)])
    result = backend.forward_backward(batch)["r"]
    losses = [o["elementwise_loss"]["data"] for o in result.loss_fn_outputs]
    logprobs = [o["logprobs"]["data"] for o in result.loss_fn_outputs]
    step = backend.optim_step("m", types.OptimStepInput(adam_params=types.AdamParams(
        learning_rate=0.0, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0)))
    out[name] = {"grad_norm": step.metrics["skyrl.ai/grad_norm"], "losses": losses,
                 "logprobs": [lp[100:160] for lp in logprobs]}
print("RESULT " + json.dumps(out))
"""


def test_advantages_that_cancel_over_the_same_tokens_train_nothing(run_backend_script, tmp_path: Path):
    """Slow: forward_backward in skyrl's JAX backend on CPU, with and without the fix."""
    from piexp.service.compat import write_launcher

    launcher = write_launcher(tmp_path)
    plain = run_backend_script(CHECK, launcher, "plain", "needed_logprobs,lora_matmuls,blocked_attention")
    patched = run_backend_script(
        CHECK, launcher, "patched", "token_sum_losses,needed_logprobs,lora_matmuls,blocked_attention"
    )
    # Without the item the pair trains the span (the shorter datum weighs more): the bias.
    alone = plain["one datum"]["grad_norm"]
    assert alone > 0
    assert plain["cancelling pair"]["grad_norm"] > 0.3 * alone
    # With it the pair's gradients cancel (rounding aside), and one datum still trains.
    assert patched["one datum"]["grad_norm"] > 0
    assert patched["cancelling pair"]["grad_norm"] < 1e-4 * patched["one datum"]["grad_norm"]
    # The client sees the same per-token losses and log-probs either way.
    for name in ("cancelling pair", "one datum"):
        for ours, theirs in zip(patched[name]["losses"], plain[name]["losses"], strict=True):
            assert ours == pytest.approx(theirs, rel=1e-4, abs=1e-6), name
        for ours, theirs in zip(patched[name]["logprobs"], plain[name]["logprobs"], strict=True):
            assert ours == pytest.approx(theirs, abs=1e-4), name
