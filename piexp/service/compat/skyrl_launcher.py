"""piexp's launcher for skyrl __SKYRL_VERSION__'s Tinker API server and engine, run by the server
venv's own interpreter as ``python launcher.py api|engine [skyrl args]`` (items 1-3, 6-9,
11 and 12 of piexp/service/compat/__init__.py). It must not use piexp, which that venv lacks;
piexp/service/compat/launcher.py reads this file as text, fills in the pinned skyrl
version and writes the copy the server runs (do not edit that copy: it is rewritten when
it differs)."""

import ctypes
import json
import os
import signal
import sys
import types

EXPECTED_SKYRL = "__SKYRL_VERSION__"

# Queries per block of item 6's causal attention, read when a program is traced: a
# module constant so that bench/sample_call.py can measure other sizes in its own process
# (128: bench/sample_call.py's figures).
CAUSAL_QUERY_BLOCK = 128


def _die_with_parent():
    # Item 3: no orphans, even when piexp is killed with SIGKILL.
    # PR_SET_PDEATHSIG = 1: SIGKILL this process when its parent dies.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    expected = os.environ.get("PIEXP_SERVER_PARENT_PID")
    if expected and os.getppid() != int(expected):
        sys.exit("piexp launcher: parent exited before the server started")


def _import_without_torch():
    # Item 1: skyrl's JAX path imports torch and peft for features a CPU run never uses.
    from importlib.metadata import version

    got = version("skyrl")
    if got != EXPECTED_SKYRL:
        sys.exit(f"piexp launcher: skyrl {got} installed, this launcher is for {EXPECTED_SKYRL}")
    import transformers.utils.import_utils as import_utils

    if import_utils.is_torch_available():
        return  # a real torch is installed: nothing to stand in for
    torch = types.ModuleType("torch")

    class Tensor:  # never an instance of anything the server receives
        pass

    def cat(*_args, **_kwargs):
        raise NotImplementedError("multimodal inputs need torch, which piexp's CPU server venv omits")

    torch.Tensor = Tensor
    torch.cat = cat
    peft = types.ModuleType("peft")

    class LoraConfig:
        def __init__(self, base_model_name_or_path=None, r=8, lora_alpha=8, **extra):
            self.fields = dict(
                base_model_name_or_path=base_model_name_or_path,
                r=r,
                lora_alpha=lora_alpha,
                peft_type="LORA",
                task_type="CAUSAL_LM",
                target_modules=None,
                lora_dropout=0.0,
                bias="none",
                inference_mode=True,
                **extra,
            )

        def save_pretrained(self, directory, **_kwargs):
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(str(directory), "adapter_config.json"), "w") as handle:
                json.dump(self.fields, handle, indent=2)

    peft.LoraConfig = LoraConfig
    saved = {name: sys.modules.get(name) for name in ("torch", "peft")}
    sys.modules.update(torch=torch, peft=peft)
    try:
        import skyrl.backends.renderer  # noqa: F401  (binds the stand-in torch)
        import skyrl.tx.utils.models  # noqa: F401  (binds the stand-in peft)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _cpu_training_speedups():
    # Item 6: on a CPU nearly all of a training step is the vocabulary-wide log-softmax
    # (151,936 exponentials per position), which skyrl computes at every position of every
    # padded sequence although only positions with a loss contribute. A forward_backward
    # now marks the positions it does not need (target -1) and the chunked log-prob
    # computation skips chunks with none needed; the gradients are unchanged (see
    # tests/service/test_compat_speedups.py).
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

    # jax.lax.ragged_dot, which skyrl's LoRA routes every token through, has a slow,
    # memory-hungry transpose on CPU (for the 151,936-wide unembedding LoRA: 2.2 s and
    # 3.3 GB per 1,024 tokens against 0.7 s for the base matmul's). The same LoRA as
    # plain matmuls: x @ A[a] @ B[a] when all tokens share adapter a (a training
    # micro-batch always does), else a one-hot mix over the adapter slots.
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

    # Causal attention on CPU: skyrl falls back to jax.nn.dot_product_attention over the
    # full [T, T] score matrix, masking the upper half after computing it; at T = 6,144
    # that is the largest cost left in a step, and a sample call's prefill is mostly
    # attention. Query blocks that only see the keys up to their own end compute about
    # half of it, and a block in which no row has a real query (right padding up to the
    # length bucket) is skipped: its outputs, at padding positions only, are zeros, and
    # no real position reads them (same values, to float rounding).
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
    jax_backend.JaxBackendImpl._create_loss_and_grad_fn = create_loss_and_grad_fn
    LogitsProcessorMixin._compute_chunked_logprobs = chunked_logprobs


def _token_sum_losses():
    # Item 9: Tinker's losses are sums over a datum's tokens (importance_sampling is
    # -(ratio * advantages).sum()); skyrl 0.4.0 divides each sequence's sum by its weight
    # count, which for an RL datum (no weights: all ones) is its whole length. Two episodes
    # of one group then share the tokens they have in common with weights A_i / L_i that no
    # longer cancel (the advantages sum to zero, the A_i / L_i do not): a short failing
    # episode beside long passing ones pushes down the tool calls they all made. Each loss
    # term is now multiplied by its sequence's count, which skyrl's division takes off
    # again, and the per-token losses a client receives are divided by it (unchanged).
    # skyrl's mean over a batch's sequences stays: one factor for every gradient, which
    # Adam's update does not see (tests/service/test_compat_loss_sum.py).
    import jax.numpy as jnp
    from skyrl.backends import jax as jax_backend

    def counted(loss):
        def token_sum(target_logprobs, loss_mask, *rest):
            return loss(target_logprobs, loss_mask, *rest) * jnp.maximum(loss_mask.sum(), 1e-9)

        return token_sum

    jax_backend.LOSS_FUNCTIONS = [counted(loss) for loss in jax_backend.LOSS_FUNCTIONS]
    original_create = jax_backend.JaxBackendImpl._create_loss_and_grad_fn

    def per_token_losses_as_sent(run):
        def wrapped(accumulated, lora, non_lora, input_ids, attention_mask, adapter_indices, target_ids, loss_mask,
                    *rest):  # fmt: skip
            grads, losses, logprobs = run(
                accumulated, lora, non_lora, input_ids, attention_mask, adapter_indices, target_ids, loss_mask, *rest
            )
            return grads, losses / jnp.maximum(loss_mask.sum(axis=-1, keepdims=True), 1e-9), logprobs

        return wrapped

    def create_loss_and_grad_fn(self):
        original_create(self)
        self._forward_backward_and_accumulate = per_token_losses_as_sent(self._forward_backward_and_accumulate)
        self._forward = per_token_losses_as_sent(self._forward)

    jax_backend.JaxBackendImpl._create_loss_and_grad_fn = create_loss_and_grad_fn


def _skip_untrained_lora():
    # Item 8: a layer no adapter of the batch trains has LoRA scaling 0. skyrl's
    # create_model never trains the embedding or the unembedding, yet both carry a LoRA
    # of the server's max rank, computed (and differentiated) at every position of every
    # training step and at every sampled token: at rank r, r / hidden_size of the
    # unembedding's cost again. Skipping it changes no value. Wraps whatever apply_lora
    # the layers have, so it goes after _cpu_training_speedups.
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


def _cpu_sampling_speedups():
    # Item 7: one decode step of a batch of 16 on the tiny model took ~160 ms, ~140 ms of
    # it in jax.random.categorical (a threefry Gumbel draw for each of the 151,936
    # vocabulary entries of each sequence, then a variadic-reduce argmax that XLA's CPU
    # backend does not vectorize, ~20 ms by itself, which the decode loop also runs for its
    # greedy branch). Both are replaced in skyrl's generator module only.
    import jax
    import jax.numpy as jnp
    from skyrl.backends import jax as jax_backend
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

    # Every distinct sampling batch size is a compilation of the whole prefill + decode
    # program (10-25 s each here), and the engine batches whatever sample requests are
    # pending (1, 2, ... 16 in an RL iteration). A batch is padded with copies of its first
    # sample (results dropped) to the next power of two, as skyrl already does for lengths.
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


def _prompt_logprobs_per_token():
    # Item 11: a sample's prompt_logprobs are one entry per prompt token, None for the
    # first (it has no context): skyrl's own SampleOutput says so and the Tinker SDK's
    # compute_logprobs passes them on as such; tinker-cookbook's KL penalty against the
    # base model reads entry i as log p(token i | tokens before i) (base_logprobs[1:]).
    # skyrl 0.4.0's JAX generator returns the n - 1 defined entries without the None, so
    # every entry was one token early and the KL penalty stopped the run on a length
    # mismatch. The None goes in front; the values are unchanged. And a batch that asks for
    # prompt log-probs is run one sequence at a time: the generator holds the logits of
    # every prompt position of the whole batch at once ([batch, length, vocabulary] in
    # float32: 16 x 2,048 x 8,218 is 1.1 GB for learner-local, x 151,936 is 20 GB for
    # tiny-local), which a KL penalty's 16 scored episodes reach at every step
    # (tests/service/test_compat_sampling.py).
    from skyrl.backends import jax as jax_backend
    from skyrl.tinker import types

    original_sample = jax_backend.JaxBackendImpl.sample

    def score_prompts_one_at_a_time_with_the_first_tokens_none(self, prepared_batch):
        if not prepared_batch.needs_prompt_logprobs:
            return original_sample(self, prepared_batch)
        limited = self.config
        self.config = limited.model_copy(update={"sample_max_num_sequences": 1})
        try:
            results = original_sample(self, prepared_batch)
        finally:
            self.config = limited
        for output in results.values():
            if isinstance(output, types.SampleOutput) and output.prompt_logprobs is not None:
                output.prompt_logprobs = [None, *output.prompt_logprobs]
        return results

    jax_backend.JaxBackendImpl.sample = score_prompts_one_at_a_time_with_the_first_tokens_none


def _prefix_kv_cache():
    # Item 12: an agent's every turn sends its whole conversation again (learner-local's
    # eval prompts: 831, 949, 1,128 tokens for turns of 56, 31, 13 sampled tokens), and
    # skyrl prefills each from its first token. The engine now keeps the keys and values
    # of what it sampled (prompt and sampled tokens, per adapter) and prefills only what
    # follows the longest kept prefix of a prompt; any change to an adapter's weights
    # (create, delete, optim_step, checkpoint and sampler-weight loads) drops them all.
    # A kept prefix's values are those a full prefill computes, to float rounding (their
    # keys and values come from a batch of other shapes); greedy tokens are the same
    # (tests/service/test_compat_prefix_cache.py). Qwen3 models only; prompt log-probs
    # (the KL penalty's scoring) always prefill in full. Opt-in (bench/prefix_cache.py:
    # evals 0.9x, the RL loop 1.0x).
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    import skyrl.tx.models.qwen3 as qwen3_module
    from skyrl.backends import jax as jax_backend
    from skyrl.tx.utils import generator
    from skyrl.tx.utils.models import round_up_seq_len
    from skyrl.utils.log import logger

    min_reuse = 32  # a shorter kept prefix is not worth a program of another shape
    suffix_length = 256  # the tokens a continued prefill computes (a turn's tool result and more)
    capacity_tokens = 1 << 18  # kept tokens in all (learner-local: 512 bytes each)

    class PrefixCache:
        def __init__(self):
            self.entries = []  # (adapter, tokens, keys, values), most recently used last
            self.tokens = 0
            self.hits = self.reused = self.prefilled = 0

        def clear(self):
            self.entries, self.tokens = [], 0

        def longest(self, adapter, prompt):
            # The kept entry sharing the longest prefix with `prompt` and that length.
            best, best_length = None, 0
            for index, (entry_adapter, tokens, _keys, _values) in enumerate(self.entries):
                if entry_adapter != adapter:
                    continue
                n = min(len(tokens), len(prompt))
                differ = np.flatnonzero(tokens[:n] != prompt[:n])
                length = int(differ[0]) if differ.size else n
                if length > best_length:
                    best, best_length = index, length
            return best, best_length

        def keep(self, adapter, tokens, keys, values):
            # Entries whose tokens this one extends are dropped: it holds them.
            self.entries = [
                entry
                for entry in self.entries
                if not (
                    entry[0] == adapter and len(entry[1]) <= len(tokens) and (entry[1] == tokens[: len(entry[1])]).all()
                )
            ]
            self.entries.append((adapter, tokens, keys, values))
            self.tokens = sum(len(entry[1]) for entry in self.entries)
            while self.tokens > capacity_tokens and len(self.entries) > 1:
                self.tokens -= len(self.entries.pop(0)[1])

    cache = PrefixCache()

    def dropping_kept_prefixes(method):
        def changed_weights(self, *args, **kwargs):
            cache.clear()
            return method(self, *args, **kwargs)

        return changed_weights

    for name in (
        "create_model",
        "delete_model",
        "optim_step",
        "load_checkpoint",
        "load_sampler_checkpoint",
        "_insert_checkpoint_data",
    ):
        setattr(jax_backend.JaxBackendImpl, name, dropping_kept_prefixes(getattr(jax_backend.JaxBackendImpl, name)))

    # Attention of a prefill that continues a kept prefix: each query sees the kept keys
    # and the new ones up to its own position, given as a [batch, query, key] mask.
    attention = qwen3_module.dot_product_attention

    def attention_with_query_masks(q, k, v, attention_mask, is_causal, head_dim):
        if attention_mask.ndim != 3:
            return attention(q, k, v, attention_mask, is_causal, head_dim)
        mask = attention_mask[:, None, :, :].astype(bool)
        return jax.nn.dot_product_attention(q, k, v, scale=1.0 / head_dim**0.5, mask=mask)

    qwen3_module.dot_product_attention = attention_with_query_masks

    @functools.partial(jax.jit, static_argnames=("max_length", "max_new_tokens", "max_top_k", "use_top_p", "continued"))
    def prefill_and_decode_keeping_kv(
        model,
        input_ids,
        attention_mask,
        starts,
        kept_keys,
        kept_values,
        max_length,
        max_new_tokens,
        adapter_indices,
        temperatures,
        rngs,
        stop_tokens,
        top_k_values,
        top_p_values,
        max_top_k,
        use_top_p,
        continued,
    ):
        # skyrl's GeneratorMixin._prefill_and_decode (skyrl __SKYRL_VERSION__, without prompt
        # log-probs), except that it returns the keys and values, and with `continued`
        # the batch's rows start at `starts`: input_ids are what follows each row's kept
        # prefix, whose keys and values are in kept_keys / kept_values.
        batch_idx = jnp.arange(input_ids.shape[0])
        key_index = jnp.arange(max_length)
        decode_layers = model.get_decode_layers()
        if continued:
            lengths = starts + attention_mask.sum(axis=1)
            positions = starts[:, None] + jnp.arange(input_ids.shape[1])[None, :]
            query_mask = (key_index[None, None, :] <= positions[:, :, None]) & (
                key_index[None, None, :] < lengths[:, None, None]
            )
            outputs = model(
                input_ids,
                attention_mask=query_mask.astype(attention_mask.dtype),
                positions=positions,
                kv_cache=generator.KVCache(keys=kept_keys, values=kept_values, cache_position=starts),
                adapter_indices=adapter_indices,
                decode_layers=decode_layers,
            )
            last_hidden = outputs.last_hidden_state[batch_idx, attention_mask.sum(axis=1) - 1][:, None, :]
            kv_cache = generator.KVCache(
                keys=outputs.kv_cache.keys,
                values=outputs.kv_cache.values,
                cache_position=lengths,
                conv_states=outputs.kv_cache.conv_states,
                recurrent_states=outputs.kv_cache.recurrent_states,
            )
            decode_attention_mask = (key_index[None, :] < lengths[:, None]).astype(attention_mask.dtype)
        else:
            lengths = attention_mask.sum(axis=1)
            outputs = model(input_ids, attention_mask=attention_mask, adapter_indices=adapter_indices)
            last_hidden = outputs.last_hidden_state[batch_idx, lengths - 1][:, None, :]
            kv_cache = outputs.kv_cache.pad_to_length(max_length)
            decode_attention_mask = jnp.pad(attention_mask, ((0, 0), (0, max_length - attention_mask.shape[1])))
        last_logits = model.compute_logits(last_hidden, adapter_indices)[:, 0, :]

        def cond_fn(s):
            return (s.step < max_new_tokens) & ~jnp.all(s.stop_pos != -1)

        def body_fn(s):
            # skyrl's decode step, with its generator module's jax / jnp (item 7's draws).
            step = s.step
            split_keys = jax.vmap(jax.random.split)(s.rngs)
            rngs, sample_keys = split_keys[:, 0], split_keys[:, 1]
            zero_temp_mask = temperatures == 0.0
            scaled_logits = s.logits / jnp.where(zero_temp_mask, 1.0, temperatures)[:, None]
            if max_top_k > 0:
                scaled_logits = generator.apply_top_k_batch(scaled_logits, top_k_values, max_top_k)
            if use_top_p:
                scaled_logits = generator.apply_top_p_batch(scaled_logits, top_p_values)
            sampled = jax.vmap(lambda key, logit: generator.jax.random.categorical(key, logit, axis=-1))(
                sample_keys, scaled_logits
            )
            greedy = generator.jnp.argmax(s.logits, axis=-1)
            next_token = jnp.where(zero_temp_mask[:, None], greedy[:, None], sampled[:, None])
            sampled_logprob = model.logits_to_logprobs(s.logits, next_token[:, 0])[:, None]
            is_stop = jnp.any(next_token == stop_tokens, axis=1)
            stop_pos = jnp.where((s.stop_pos == -1) & is_stop, step + 1, s.stop_pos)
            rows = jnp.arange(s.attention_mask.shape[0])
            next_attention_mask = s.attention_mask.at[rows, s.kv_cache.cache_position].set(1)
            outputs = model(
                next_token,
                attention_mask=next_attention_mask,
                positions=s.last_positions + 1,
                kv_cache=s.kv_cache,
                adapter_indices=adapter_indices,
                decode_layers=decode_layers,
            )
            next_logits = model.compute_logits(outputs.last_hidden_state, adapter_indices)[:, 0, :]
            return generator.DecodeState(
                kv_cache=outputs.kv_cache,
                rngs=rngs,
                attention_mask=next_attention_mask,
                last_positions=s.last_positions + 1,
                logits=next_logits,
                stop_pos=stop_pos,
                step=step + 1,
                generated_tokens=s.generated_tokens.at[:, step].set(next_token.squeeze(-1)),
                generated_logprobs=s.generated_logprobs.at[:, step].set(sampled_logprob.squeeze(-1)),
            )

        batch_size = input_ids.shape[0]
        initial_state = generator.DecodeState(
            kv_cache=kv_cache,
            rngs=rngs,
            attention_mask=decode_attention_mask,
            last_positions=(lengths - 1)[:, None],
            logits=last_logits,
            stop_pos=jnp.full((batch_size,), -1),
            step=jnp.int32(0),
            generated_tokens=jnp.zeros((batch_size, max_new_tokens), dtype=jnp.int32),
            generated_logprobs=jnp.zeros((batch_size, max_new_tokens), dtype=jnp.float32),
        )
        final = jax.lax.while_loop(cond_fn, body_fn, initial_state)
        kept = final.kv_cache
        return final.generated_tokens, final.generated_logprobs, final.stop_pos, kept.keys, kept.values

    original_generate = generator.GeneratorMixin.generate

    def generate_continuing_kept_prefixes(
        self, input_ids, attention_mask, *, sampling_params, adapter_indices=None, prompt_logprobs=False,
        tokenizer=None,
    ):  # fmt: skip
        if prompt_logprobs or not isinstance(self, qwen3_module.Qwen3ForCausalLM) or jax.process_count() > 1:
            return original_generate(
                self, input_ids, attention_mask, sampling_params=sampling_params, adapter_indices=adapter_indices,
                prompt_logprobs=prompt_logprobs, tokenizer=tokenizer,
            )  # fmt: skip
        ids, mask = np.asarray(jax.device_get(input_ids)), np.asarray(jax.device_get(attention_mask))
        batch_size, prompt_length = ids.shape
        adapters = (
            np.zeros(batch_size, np.int32) if adapter_indices is None else np.asarray(jax.device_get(adapter_indices))
        )
        lengths = mask.sum(axis=1)
        prompts = [ids[row, : lengths[row]] for row in range(batch_size)]
        found = [cache.longest(int(adapters[row]), prompts[row]) for row in range(batch_size)]
        # At least a prompt's last token is prefilled: its logits give the first draw.
        starts = np.array(
            [min(length, lengths[row] - 1) if length >= min_reuse else 0 for row, (_, length) in enumerate(found)],
            np.int32,
        )
        max_new_tokens = max(sp.max_tokens for sp in sampling_params)
        max_length = round_up_seq_len(prompt_length + max_new_tokens)
        # A continued batch is always padded to `suffix_length` new tokens and (unless
        # it asks for fewer new tokens than that) `max_length` as a full one: each
        # compiled program (10-25 s here) then serves every continued batch of its size
        # and prompt length. A batch with a longer suffix (a prompt with nothing kept)
        # prefills in full.
        continued = bool(starts.any()) and int((lengths - starts).max()) <= suffix_length < prompt_length
        if continued:
            max_length = max(max_length, round_up_seq_len(int(starts.max()) + suffix_length))
            suffix_ids = np.zeros((batch_size, suffix_length), np.int32)
            suffix_mask = np.zeros((batch_size, suffix_length), np.int32)
            kept_keys = kept_values = None
            for row in range(batch_size):
                follow = prompts[row][starts[row] :]
                suffix_ids[row, : len(follow)] = follow
                suffix_mask[row, : len(follow)] = 1
                entry = found[row][0]
                if starts[row] == 0:
                    continue
                _adapter, _tokens, keys, values = cache.entries[entry]
                if kept_keys is None:
                    layers = len(keys)
                    shape = (batch_size, max_length, *keys[0].shape[1:])
                    kept_keys = [np.zeros(shape, keys[0].dtype) for _ in range(layers)]
                    kept_values = [np.zeros(shape, values[0].dtype) for _ in range(layers)]
                for layer in range(layers):
                    kept_keys[layer][row, : starts[row]] = keys[layer][: starts[row]]
                    kept_values[layer][row, : starts[row]] = values[layer][: starts[row]]
            arrays = (suffix_ids, suffix_mask, starts, kept_keys, kept_values)
        else:
            starts = np.zeros(batch_size, np.int32)
            arrays = (ids, mask, starts, None, None)
        hits, reused, prefilled = int((starts > 0).sum()), int(starts.sum()), int((lengths - starts).sum())
        cache.hits += hits
        cache.reused += reused
        cache.prefilled += prefilled
        logger.info(
            f"(prefix cache) {hits} of {batch_size} prompts continued, {reused} tokens kept, {prefilled} prefilled"
        )
        temperatures = jnp.array([sp.temperature for sp in sampling_params])
        top_k_values = jnp.array([sp.top_k for sp in sampling_params], dtype=jnp.int32)
        top_p_values = jnp.array([sp.top_p for sp in sampling_params], dtype=jnp.float32)
        rngs = jax.vmap(jax.random.PRNGKey)(jnp.array([sp.seed for sp in sampling_params]))
        max_stop_tokens = max(len(sp.stop_tokens) if sp.stop_tokens else 0 for sp in sampling_params)
        stop_tokens = jnp.array(
            [(sp.stop_tokens or []) + [-1] * (max_stop_tokens - len(sp.stop_tokens or [])) for sp in sampling_params],
            dtype=jnp.int32,
        )
        max_top_k = max((sp.top_k for sp in sampling_params if sp.top_k > 0), default=0)
        use_top_p = any(sp.top_p < 1.0 for sp in sampling_params)
        new_tokens, new_logprobs, stop_pos, keys, values = prefill_and_decode_keeping_kv(
            self, *arrays, max_length, max_new_tokens, adapter_indices, temperatures, rngs, stop_tokens,
            top_k_values, top_p_values, max_top_k, use_top_p, continued,
        )  # fmt: skip
        max_tokens = np.array([sp.max_tokens for sp in sampling_params])
        new_tokens, new_logprobs, stop_pos, keys, values = jax.device_get(
            (new_tokens, new_logprobs, stop_pos, keys, values)
        )
        has_stop = (stop_pos != -1) & (stop_pos <= max_tokens)
        end_positions = np.where(has_stop, stop_pos, max_tokens)
        generated_ids, stop_reasons, logprobs_out = [], [], []
        for row in range(batch_size):
            tokens = new_tokens[row][: end_positions[row]].tolist()
            token_logprobs = new_logprobs[row][: end_positions[row]].tolist()
            stop_reason = "stop" if has_stop[row] else "length"
            if sampling_params[row].stop_strings:  # as skyrl's generate
                assert tokenizer is not None, "tokenizer is required when stop_strings is specified"
                assert stop_reason == "length", "stop_tokens cannot be specified when stop_strings is specified"
                string_stop = generator.find_string_stop_position(tokens, tokenizer, sampling_params[row].stop_strings)
                if string_stop is not None:
                    tokens, token_logprobs, stop_reason = tokens[:string_stop], token_logprobs[:string_stop], "stop"
            generated_ids.append(tokens)
            stop_reasons.append(stop_reason)
            logprobs_out.append(token_logprobs)
            # Every sampled token was fed back, so its keys and values are in the cache.
            kept = np.concatenate([prompts[row], np.asarray(tokens, np.int32)])
            n = len(kept)
            cache.keep(
                int(adapters[row]), kept, [layer[row, :n].copy() for layer in keys],
                [layer[row, :n].copy() for layer in values],
            )  # fmt: skip
        return generator.GenerateOutput(generated_ids=generated_ids, stop_reasons=stop_reasons, logprobs=logprobs_out)

    generator.GeneratorMixin.generate = generate_continuing_kept_prefixes
    return cache


def _engine_patches():
    # Everything the engine applies before it starts, in order (also what a check or bench
    # script loads to measure the engine as it runs).
    _token_sum_losses()
    _cpu_training_speedups()
    _skip_untrained_lora()
    _cpu_sampling_speedups()
    _prompt_logprobs_per_token()
    if os.environ.get("PIEXP_PREFIX_CACHE") == "1":  # service.prefix_cache
        _prefix_kv_cache()


def _engine():
    import runpy

    runpy.run_module("skyrl.tinker.engine", run_name="__main__", alter_sys=True)


def _api():
    import argparse

    import uvicorn
    from skyrl.tinker import api
    from skyrl.tinker.config import EngineConfig, add_model, config_to_argv

    # Item 2: the engine runs with this interpreter (through this launcher), not `uv run`.
    def engine_command(_parent_cmd, engine_config):
        return [sys.executable, os.path.abspath(__file__), "engine", *config_to_argv(engine_config)]

    api._build_uv_run_cmd_engine = engine_command
    # The same start-up as skyrl/tinker/api.py's __main__ block (skyrl __SKYRL_VERSION__).
    parser = argparse.ArgumentParser(description="SkyRL tinker API server (piexp launcher)")
    add_model(parser, EngineConfig)
    parser.add_argument("--host", type=str, default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    # A socket piexp bound and listens on before starting us: no window in which another
    # process could take the port (or answer piexp's readiness probe in our stead).
    parser.add_argument("--listen-fd", type=int, default=None)
    args = parser.parse_args()
    engine_config = EngineConfig.model_validate({k: v for k, v in vars(args).items() if k in EngineConfig.model_fields})
    api.app.state.engine_config = engine_config
    config = uvicorn.Config(
        api.app,
        host=args.host,
        port=args.port,
        log_config=api.get_uvicorn_log_config(),
        backlog=api.SKYRL_HTTP_CONNECTION_LIMIT,
        timeout_keep_alive=api.HTTP_KEEP_ALIVE_TIMEOUT_SECONDS,
    )
    sockets = None
    if args.listen_fd is not None:
        import socket

        sockets = [socket.socket(fileno=args.listen_fd)]
    uvicorn.Server(config).run(sockets=sockets)


if __name__ == "__main__":
    role = sys.argv.pop(1)
    _die_with_parent()
    os.environ["PIEXP_SERVER_PARENT_PID"] = str(os.getpid())  # the engine's parent is us
    _import_without_torch()
    if role == "engine":
        _engine_patches()
        _engine()
    elif role == "api":
        _api()
    else:
        sys.exit(f"piexp launcher: unknown role {role!r}")
