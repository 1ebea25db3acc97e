"""The CPU speed-ups of the local server (piexp/service/compat/skyrl_server/speedups.py, items 1-4) change no number
that matters: in skyrl's own JAX backend, on the tiny model, one forward_backward with
and one without them give the same log-probs at every position with a loss, the same
loss and the same gradient (norm, after an optimizer step), for supervised
(cross_entropy, weights on a few spans) and RL (importance_sampling, advantages on a few
spans) batches of two sequences of different lengths (so padding, skipped chunks and
several attention blocks are all exercised); and the blocked causal attention gives
skyrl's values at every real position, skips a block that holds only padding, and
samples skyrl's greedy tokens."""

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
                         train_micro_batch_size=1, loss_chunk_size=128), 0)
backend.create_model("m", types.LoraConfig(rank=8, alpha=32.0, seed=0))
# Token ids the model's vocabulary holds, below its 26 added (special) tokens.
VOCAB = json.load(open(sys.argv[2] + "/config.json"))["vocab_size"]
ORDINARY_TOKENS = VOCAB - 26
UNIFORM_LOGPROB = float(np.log(VOCAB))  # a sampled token's log-prob under a uniform model
rng = np.random.default_rng(0)
lengths = (1300, 700)
out = {}
for loss in ("cross_entropy", "importance_sampling"):
    ids = [[int(t) for t in rng.integers(0, ORDINARY_TOKENS, n)] for n in lengths]
    spans = [[1.0 if (i % 400) >= 350 else 0.0 for i in range(n)] for n in lengths]
    if loss == "cross_entropy":
        weights, advantages, sampled = spans, [[0.0] * n for n in lengths], [[0.0] * n for n in lengths]
    else:
        weights = [[1.0] * n for n in lengths]
        advantages = [[0.7 * s for s in span] for span in spans]
        sampled = [[-UNIFORM_LOGPROB * s for s in span] for span in spans]
    batch = types.PreparedModelPassBatch(
        all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=s)]) for s in ids],
        all_targets=ids, all_token_weights=weights, all_sampling_logprobs=sampled, all_advantages=advantages,
        all_values=[[] for _ in ids], all_returns=[[] for _ in ids], all_model_ids=["m"] * 2,
        all_loss_fns=[loss] * 2, all_loss_fn_configs=[None] * 2, request_batch_slices=[("r", "m", 0, 2)])
    result = backend.forward_backward(batch)["r"]
    logprobs = [o["logprobs"]["data"] for o in result.loss_fn_outputs]
    losses = [o["elementwise_loss"]["data"] for o in result.loss_fn_outputs]
    needed = [[lp for lp, s in zip(seq, span) if s] for seq, span in zip(logprobs, spans)]
    step = backend.optim_step("m", types.OptimStepInput(adam_params=types.AdamParams(
        learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0)))
    out[loss] = {"logprobs": needed, "loss": sum(map(sum, losses)), "grad_norm": step.metrics["skyrl.ai/grad_norm"]}
print("RESULT " + json.dumps(out))
"""


def test_speedups_leave_logprobs_losses_and_gradients_unchanged(run_backend_script, tmp_path: Path):
    """Slow: forward_backward runs in skyrl's JAX backend on CPU (compiled for each batch
    shape), with and without the speed-ups."""
    from piexp.service.compat import write_launcher

    launcher = write_launcher(tmp_path)
    plain = run_backend_script(CHECK, launcher, "plain", "needed_logprobs,lora_matmuls,blocked_attention")
    patched = run_backend_script(
        CHECK, launcher, "patched", "needed_logprobs,lora_matmuls,blocked_attention,untrained_lora"
    )
    for loss in ("cross_entropy", "importance_sampling"):
        assert patched[loss]["grad_norm"] > 0
        assert patched[loss]["grad_norm"] == pytest.approx(plain[loss]["grad_norm"], rel=1e-4), loss
        assert patched[loss]["loss"] == pytest.approx(plain[loss]["loss"], rel=1e-4), loss
        for ours, theirs in zip(patched[loss]["logprobs"], plain[loss]["logprobs"], strict=True):
            assert len(ours) == len(theirs) > 0
            assert ours == pytest.approx(theirs, abs=1e-3), loss


ATTENTION = r"""
import json
import jax, jax.numpy as jnp, numpy as np
import skyrl.tx.models.qwen3 as qwen3_module
from skyrl.backends.jax import JaxBackendConfig, JaxBackendImpl
from skyrl.tinker import types
from skyrl.tx.layers.attention import dot_product_attention as skyrls

out = {}
# Rows of 130, 300 and 520 real tokens, padded on the right to 768: with blocks of 128,
# block 640-767 holds no real query in any row (skipped when patched).
lengths, padded = (130, 300, 520), 768
rng = np.random.default_rng(0)
mask = np.zeros((3, padded), np.int32)
for row, n in enumerate(lengths):
    mask[row, :n] = 1
q, k, v = (jnp.asarray(rng.normal(size=(3, padded, heads, 16)).astype(np.float32)) for heads in (4, 2, 2))
ours = np.asarray(qwen3_module.dot_product_attention(q, k, v, jnp.asarray(mask), True, 16))
theirs = np.asarray(skyrls(q, k, v, jnp.asarray(mask), True, 16))
real = mask.astype(bool)
out["real_max_diff"] = float(np.abs(ours[real] - theirs[real]).max())
# Unpatched, the module's attention is skyrl's own: its padding outputs are not zeros.
out["tail_block_zero"] = bool((ours[:, 640:] == 0).all())
# Greedy sampling of the same three prompts through skyrl's generator (prefill and decode).
backend = JaxBackendImpl(sys.argv[2], JaxBackendConfig(max_lora_adapters=2, max_lora_rank=8), 0)
ORDINARY_TOKENS = json.load(open(sys.argv[2] + "/config.json"))["vocab_size"] - 26  # below the added tokens
prompts = [[int(t) for t in rng.integers(0, ORDINARY_TOKENS, n)] for n in lengths]
batch = types.PreparedSampleBatch(
    all_model_inputs=[types.ModelInput(chunks=[types.EncodedTextChunk(tokens=p)]) for p in prompts],
    all_sampling_params=[types.SamplingParams(temperature=0.0, max_tokens=8, seed=i) for i in range(3)],
    all_model_ids=[""] * 3, all_checkpoint_ids=[""] * 3, all_checkpoint_paths=[""] * 3,
    all_session_ids=[None] * 3, needs_prompt_logprobs=False,
    request_batch_slices=[(f"r{i}", "", i, i + 1, False, 0) for i in range(3)])
result = backend.sample(batch)
out["greedy"] = [[result[f"r{i}"].sequences[0].tokens, result[f"r{i}"].sequences[0].logprobs] for i in range(3)]
print("RESULT " + json.dumps(out))
"""


def test_blocked_attention_skips_padding_only_blocks_and_keeps_real_positions(run_backend_script, tmp_path: Path):
    """Slow (about 20 s: prefill and decode compile in skyrl's JAX backend, with and
    without speed-up 3). The causal attention in query blocks gives skyrl's outputs at every
    real position of a batch of rows of different lengths, and a block in which every row
    is padding is skipped (its outputs zeros, where skyrl's are not); greedy sampling of
    those rows picks the same tokens with the same log-probs."""
    from piexp.service.compat import write_launcher

    launcher = write_launcher(tmp_path)
    plain = run_backend_script(ATTENTION, launcher, "plain", "needed_logprobs,lora_matmuls,blocked_attention")
    patched = run_backend_script(ATTENTION, launcher, "patched", "needed_logprobs,lora_matmuls,blocked_attention")
    assert plain["real_max_diff"] == 0.0  # skyrl's against itself
    assert patched["real_max_diff"] < 1e-5
    assert patched["tail_block_zero"] and not plain["tail_block_zero"]
    for ours, theirs in zip(patched["greedy"], plain["greedy"], strict=True):
        assert ours[0] == theirs[0] and len(ours[0]) == 8
        assert ours[1] == pytest.approx(theirs[1], abs=1e-4)


FLAGS = r"""
import json
from skyrl.backends import jax as jax_backend
from skyrl.tx.layers.lora import LoRALinear
import skyrl.tx.models.qwen3 as qwen3_module
from skyrl.tx.utils import generator
original = {"lora": LoRALinear.apply_lora, "attention": qwen3_module.dot_product_attention,
            "jax": generator.jax, "create": jax_backend.JaxBackendImpl._create_loss_and_grad_fn}
launcher.engine_patches()
print("RESULT " + json.dumps({
    "lora_matmuls": LoRALinear.apply_lora.__name__ == "apply_lora_with_matmuls",
    "blocked_attention": qwen3_module.dot_product_attention is not original["attention"],
    "sampling_draws": generator.jax is not original["jax"],
    "fixes": jax_backend.JaxBackendImpl._create_loss_and_grad_fn is not original["create"],
}))
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("lora_matmuls", {"lora_matmuls": True, "blocked_attention": False, "sampling_draws": False}),
        ("none", {"lora_matmuls": False, "blocked_attention": False, "sampling_draws": False}),
        ("all", {"lora_matmuls": False, "blocked_attention": True, "sampling_draws": True}),
    ],
)
def test_each_speedup_is_its_own_flag_and_the_fixes_always_apply(server_venv: Path, setting: str, expected: dict):
    """PIEXP_SKYRL_SPEEDUPS names the speed-ups the engine applies (all by default), so a
    bench can measure one against the rest; the correctness fixes apply whatever it says.
    ("all": untrained_lora wraps lora_matmuls' function, so the name seen is the wrapper's.)
    About 3 s each (8 s on a busy 2-core machine): the server venv imports skyrl's JAX backend."""
    from piexp.service.compat import run_server_script
    from piexp.service.local_venv import venv_python

    applied = run_server_script(FLAGS, python=venv_python(server_venv), env={"PIEXP_SKYRL_SPEEDUPS": setting})
    assert applied == {**expected, "fixes": True}
