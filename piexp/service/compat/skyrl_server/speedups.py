"""CPU speed-ups of skyrl __SKYRL_VERSION__'s JAX engine, each its own flag (a name of
:data:`SPEEDUPS`; ``PIEXP_SKYRL_SPEEDUPS`` lists those the engine applies, all by
default), each measured and each changing no value that matters: log-probs at loss
positions, losses, gradients and greedy tokens are skyrl's own to float rounding
(``tests/service/test_compat_speedups.py``, ``tests/service/test_compat_sampling.py``).

1. ``needed_logprobs``: a forward_backward computes the vocabulary-wide log-softmax only
   where a loss needs it (figures: bench/local_service.py).
2. ``lora_matmuls``: LoRA as plain matmuls instead of ``jax.lax.ragged_dot`` (figures:
   bench/local_service.py).
3. ``blocked_attention``: causal attention in query blocks that see only the keys up to
   their end, padding-only blocks skipped (figures: bench/sample_call.py).
4. ``untrained_lora``: a LoRA layer no adapter of the batch trains is skipped (figures:
   bench/untrained_lora.py).
5. ``sampling_draws``: the categorical draw in two levels by inverse CDF, argmax as a max
   and a min, in skyrl's generator only (figures: its comment, from a probe).
6. ``power_of_two_batches``: sample batches padded to the next power of two, so that each
   batch size compiles once (figures: its comment).

A bench measures one against the others by its flag: ``PIEXP_SKYRL_SPEEDUPS=all`` and the
same list without it.

Runs in the server venv without piexp (written out by piexp/service/compat/launcher.py).
"""

import types

# Queries per block of speed-up 3, read when a program is traced: a module constant so
# that bench/sample_call.py can measure other sizes in its own process (128: its figures).
CAUSAL_QUERY_BLOCK = 128


def needed_logprobs():
    # On a CPU nearly all of a training step is the vocabulary-wide log-softmax (151,936
    # exponentials per position), which skyrl computes at every position of every padded
    # sequence although only positions with a loss contribute. A forward_backward now marks
    # the positions it does not need (target -1) and the chunked log-prob computation skips
    # chunks with none needed; the gradients are unchanged.
    import jax
    import jax.numpy as jnp
    from skyrl.backends import jax as jax_backend
    from skyrl.tinker.types import LOSS_TYPES
    from skyrl.tx.utils.logits_processor import LogitsProcessorMixin

    # Losses whose every term is multiplied by the advantage: a position with advantage 0
    # (an observation token) has no gradient; sampled tokens keep their log-probs (they
    # carry a nonzero sampling log-prob) for the client's KL metrics.
    advantage_losses = jnp.asarray(
        [LOSS_TYPES[name] for name in ("importance_sampling", "ppo", "cispo") if name in LOSS_TYPES], jnp.int32
    )

    @jax.jit
    def needed_targets(target_ids, attention_mask, loss_mask, advantages, sampling_logprobs, loss_fn_types):
        by_advantage = jnp.isin(loss_fn_types, advantage_losses)[:, None]
        carries = (advantages != 0) | (sampling_logprobs != 0)
        needed = (loss_mask != 0) & (attention_mask != 0) & (~by_advantage | carries)
        return jnp.where(needed, target_ids, -1)

    original_create = jax_backend.JaxBackendImpl._create_loss_and_grad_fn

    def create_loss_and_grad_fn(self):
        original_create(self)
        fused = self._forward_backward_and_accumulate

        def forward_backward_needed_only(
            accumulated,
            lora,
            non_lora,
            input_ids,
            attention_mask,
            adapter_indices,
            target_ids,
            loss_mask,
            loss_fn_types,
            sampling_logprobs,
            advantages,
            loss_fn_config,
        ):
            targets = needed_targets(
                target_ids, attention_mask, loss_mask, advantages, sampling_logprobs, loss_fn_types
            )
            return fused(
                accumulated,
                lora,
                non_lora,
                input_ids,
                attention_mask,
                adapter_indices,
                targets,
                loss_mask,
                loss_fn_types,
                sampling_logprobs,
                advantages,
                loss_fn_config,
            )

        self._forward_backward_and_accumulate = forward_backward_needed_only

    def chunked_logprobs(self, hidden_states, target_ids, chunk_size, adapter_indices):
        # skyrl's _compute_chunked_logprobs, except: a target < 0 means "not needed" (its
        # log-prob is 0) and a chunk without any needed target computes no logits.
        batch, length, hidden = hidden_states.shape
        total = batch * length
        lm_head = self.get_lm_head()
        if adapter_indices is None:
            adapters = jnp.zeros(total, dtype=jnp.int32)
        else:
            adapters = jnp.repeat(adapter_indices, length)
        chunks = -(-total // chunk_size)
        pad = chunks * chunk_size - total
        flat_hidden = jnp.pad(hidden_states.reshape(-1, hidden), ((0, pad), (0, 0)))
        flat_targets = jnp.pad(target_ids.reshape(-1), (0, pad), constant_values=-1)
        adapters = jnp.pad(adapters, (0, pad))

        def computed(args):
            chunk_hidden, chunk_targets, chunk_adapters = args
            logits = lm_head(chunk_hidden, chunk_adapters)
            logprobs = LogitsProcessorMixin.logits_to_logprobs(logits, jnp.maximum(chunk_targets, 0))
            return jnp.where(chunk_targets >= 0, logprobs, jnp.zeros_like(logprobs))

        chunked = (
            flat_hidden.reshape(chunks, chunk_size, hidden),
            flat_targets.reshape(chunks, chunk_size),
            adapters.reshape(chunks, chunk_size),
        )
        shape = jax.eval_shape(computed, jax.tree.map(lambda x: x[0], chunked))

        def skipped(args):
            return jnp.zeros(shape.shape, shape.dtype)

        def one_chunk(args):
            return jax.lax.cond(jnp.any(args[1] >= 0), computed, skipped, args)

        # Always recomputed in the backward pass: otherwise the scan keeps every chunk's
        # [chunk, vocabulary] softmax for it (3.7 GB for one 6,144-token sequence).
        one_chunk = jax.checkpoint(one_chunk, policy=None)
        return jax.lax.map(one_chunk, chunked).reshape(-1)[:total].reshape(batch, length)

    jax_backend.JaxBackendImpl._create_loss_and_grad_fn = create_loss_and_grad_fn
    LogitsProcessorMixin._compute_chunked_logprobs = chunked_logprobs


def lora_matmuls():
    # jax.lax.ragged_dot, which skyrl's LoRA routes every token through, has a slow,
    # memory-hungry transpose on CPU (for the 151,936-wide unembedding LoRA: 2.2 s and
    # 3.3 GB per 1,024 tokens against 0.7 s for the base matmul's). The same LoRA as
    # plain matmuls: x @ A[a] @ B[a] when all tokens share adapter a (a training
    # micro-batch always does), else a one-hot mix over the adapter slots.
    import jax
    import jax.numpy as jnp
    from skyrl.tx.layers.lora import LoRALinear

    def apply_lora_with_matmuls(self, x, base_output, adapter_indices):
        if self.max_lora_adapters == 0 or adapter_indices is None:
            return base_output
        flat = x.reshape(-1, *x.shape[base_output.ndim - 1 :])
        per_token = jnp.repeat(adapter_indices, flat.shape[0] // adapter_indices.shape[0])
        lora_a, lora_b = self.lora_A[...], self.lora_B[...]

        def one_adapter(tokens):
            return (tokens @ lora_a[per_token[0]]) @ lora_b[per_token[0]]

        def mixed_adapters(tokens):
            low_rank = jnp.einsum("ti,air->tar", tokens, lora_a)
            low_rank = low_rank * jax.nn.one_hot(per_token, lora_a.shape[0], dtype=low_rank.dtype)[:, :, None]
            return jnp.einsum("tar,aro->to", low_rank, lora_b)

        lora_output = jax.lax.cond(jnp.all(per_token == per_token[0]), one_adapter, mixed_adapters, flat)
        scaling = self.lora_scaling[...][per_token].reshape(base_output.shape[:-1] + (1,))
        return base_output + lora_output.reshape(base_output.shape) * scaling

    LoRALinear.apply_lora = apply_lora_with_matmuls


def blocked_attention():
    # Causal attention on CPU: skyrl falls back to jax.nn.dot_product_attention over the
    # full [T, T] score matrix, masking the upper half after computing it; at T = 6,144
    # that is the largest cost left in a step, and a sample call's prefill is mostly
    # attention. Query blocks that only see the keys up to their own end compute about
    # half of it, and a block in which no row has a real query (right padding up to the
    # length bucket) is skipped: its outputs, at padding positions only, are zeros, and
    # no real position reads them (same values, to float rounding).
    import jax
    import jax.numpy as jnp
    import skyrl.tx.models.qwen3 as qwen3_module
    from skyrl.tx.layers import attention as attention_module

    original_attention = attention_module.dot_product_attention

    def causal_attention_in_blocks(q, k, v, attention_mask, is_causal, head_dim):
        length, query_block = q.shape[1], CAUSAL_QUERY_BLOCK
        if jax.default_backend() != "cpu" or not is_causal or k.shape[1] != length or length <= query_block:
            return original_attention(q, k, v, attention_mask, is_causal, head_dim)
        outputs = []
        for start in range(0, length, query_block):
            end = min(start + query_block, length)

            def attend(operands, start=start, end=end):
                q, k, v, attention_mask = operands
                causal = jnp.arange(end)[None, :] <= jnp.arange(start, end)[:, None]
                mask = attention_mask[:, None, None, :end].astype(bool) & causal[None, None]
                return jax.nn.dot_product_attention(
                    q[:, start:end], k[:, :end], v[:, :end], scale=1.0 / head_dim**0.5, mask=mask
                )

            def padding_only(operands, start=start, end=end):
                q = operands[0]
                return jnp.zeros((q.shape[0], end - start, *q.shape[2:]), q.dtype)

            has_query = jnp.any(attention_mask[:, start:end] != 0)
            outputs.append(jax.lax.cond(has_query, attend, padding_only, (q, k, v, attention_mask)))
        return jnp.concatenate(outputs, axis=1)

    qwen3_module.dot_product_attention = causal_attention_in_blocks


def untrained_lora():
    # A layer no adapter of the batch trains has LoRA scaling 0. skyrl's create_model
    # never trains the embedding or the unembedding, yet both carry a LoRA of the server's
    # max rank, computed (and differentiated) at every position of every training step and
    # at every sampled token: at rank r, r / hidden_size of the unembedding's cost again.
    # Skipping it changes no value. Wraps whatever apply_lora the layers have (so it
    # applies after lora_matmuls: the order of ENGINE_PATCHES in __init__.py).
    import jax
    import jax.numpy as jnp
    from skyrl.tx.layers.lora import LoRAEmbed, LoRALinear

    def skipping_untrained(apply_lora):
        def apply_unless_untrained(self, x, base_output, adapter_indices):
            if self.max_lora_adapters == 0 or adapter_indices is None:
                return base_output
            untrained = jnp.all(self.lora_scaling[...][adapter_indices] == 0)
            return jax.lax.cond(
                untrained, lambda: base_output, lambda: apply_lora(self, x, base_output, adapter_indices)
            )

        return apply_unless_untrained

    LoRALinear.apply_lora = skipping_untrained(LoRALinear.apply_lora)
    LoRAEmbed.apply_lora = skipping_untrained(LoRAEmbed.apply_lora)


def sampling_draws():
    # One decode step of a batch of 16 on the tiny model took ~160 ms, ~140 ms of it in
    # jax.random.categorical (a threefry Gumbel draw for each of the 151,936 vocabulary
    # entries of each sequence, then a variadic-reduce argmax that XLA's CPU backend does
    # not vectorize, ~20 ms by itself, which the decode loop also runs for its greedy
    # branch). Both are replaced in skyrl's generator module only.
    import jax
    import jax.numpy as jnp
    from skyrl.tx.utils import generator

    block = 1024  # vocabulary entries per block of the two-level draw

    def categorical_by_inverse_cdf(key, logits, axis=-1, shape=None, replace=True, mode=None):
        # Exactly the categorical distribution softmax(logits), drawn in two levels with
        # two uniforms: a block of `block` entries with probability its share of the
        # mass, then an entry within it with probability its share of the block's mass
        # (cumulative sums of 149 and 1,024 floats instead of 151,936 random draws).
        if logits.ndim != 1 or shape is not None or axis not in (-1, 0) or not replace:
            return jax.random.categorical(key, logits, axis=axis, shape=shape, replace=replace, mode=mode)
        size = logits.shape[0]
        blocks = -(-size // block)
        padded = jnp.pad(logits, (0, blocks * block - size), constant_values=-jnp.inf).reshape(blocks, block)
        weights = jnp.exp(padded - jnp.max(padded))
        # In (0, 1]: the first cumulative mass >= u * total then always has mass > 0.
        uniforms = 1.0 - jax.random.uniform(key, (2,), dtype=weights.dtype)
        block_mass = jnp.cumsum(weights.sum(axis=1))
        chosen = jnp.minimum(jnp.sum(block_mass < uniforms[0] * block_mass[-1]), blocks - 1)
        within = jnp.cumsum(jax.lax.dynamic_index_in_dim(weights, chosen, keepdims=False))
        offset = jnp.minimum(jnp.sum(within < uniforms[1] * within[-1]), block - 1)
        return (chosen * block + offset).astype(jnp.int32)

    def argmax_by_min_index(a, axis=None, out=None, keepdims=None):
        # jnp.argmax's result (the first index of the maximum, NaN counting as maximum)
        # with a max and a min reduction.
        if out is not None or keepdims or axis not in (-1, a.ndim - 1) or a.ndim == 0:
            return jnp.argmax(a, axis=axis, out=out, keepdims=keepdims)
        top = jnp.max(a, axis=-1, keepdims=True)
        index = jax.lax.broadcasted_iota(jnp.int32, a.shape, a.ndim - 1)
        return jnp.min(jnp.where((a == top) | jnp.isnan(a), index, a.shape[-1]), axis=-1)

    class Delegate(types.ModuleType):
        # `target` with some attributes replaced; everything else is target's own.
        def __init__(self, target, **replaced):
            super().__init__(target.__name__)
            self.__dict__.update(replaced)
            self._target = target

        def __getattr__(self, name):
            return getattr(self._target, name)

    generator.jax = Delegate(jax, random=Delegate(jax.random, categorical=categorical_by_inverse_cdf))
    generator.jnp = Delegate(jnp, argmax=argmax_by_min_index)


def power_of_two_batches():
    # Every distinct sampling batch size is a compilation of the whole prefill + decode
    # program (10-25 s each here), and the engine batches whatever sample requests are
    # pending (1, 2, ... 16 in an RL iteration). A batch is padded with copies of its first
    # sample (results dropped) to the next power of two, as skyrl already does for lengths.
    from skyrl.backends import jax as jax_backend

    original_sample = jax_backend.JaxBackendImpl.sample

    def sample_in_power_of_two_batches(self, prepared_batch):
        count = len(prepared_batch.all_model_inputs)
        limit = self.config.sample_max_num_sequences
        target = 1 << max(count - 1, 0).bit_length()
        if limit > 0:
            target = min(target, limit) if count <= limit else count
        if count == 0 or target == count:
            return original_sample(self, prepared_batch)
        extra = target - count
        padded = prepared_batch.model_copy(
            update={
                name: getattr(prepared_batch, name) + [getattr(prepared_batch, name)[0]] * extra
                for name in (
                    "all_model_inputs",
                    "all_sampling_params",
                    "all_model_ids",
                    "all_checkpoint_ids",
                    "all_checkpoint_paths",
                    "all_session_ids",
                )
            }
        )
        return original_sample(self, padded)

    jax_backend.JaxBackendImpl.sample = sample_in_power_of_two_batches


#: Every speed-up by its flag, in the order the engine applies them.
SPEEDUPS = {
    "needed_logprobs": needed_logprobs,
    "lora_matmuls": lora_matmuls,
    "blocked_attention": blocked_attention,
    "untrained_lora": untrained_lora,
    "sampling_draws": sampling_draws,
    "power_of_two_batches": power_of_two_batches,
}


def enabled(setting):
    """The flags ``PIEXP_SKYRL_SPEEDUPS`` (``setting``) turns on: every speed-up when it is
    unset (None) or ``all``, none for ``none`` or empty, else the comma-separated names."""
    if setting is None or setting.strip() == "all":
        return list(SPEEDUPS)
    names = [name.strip() for name in setting.split(",") if name.strip() and name.strip() != "none"]
    unknown = [name for name in names if name not in SPEEDUPS]
    if unknown:
        raise SystemExit(f"piexp launcher: unknown speed-up {', '.join(unknown)} (known: {', '.join(SPEEDUPS)})")
    return names
