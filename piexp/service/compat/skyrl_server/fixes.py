"""Correctness fixes of skyrl __SKYRL_VERSION__'s JAX engine: without them a run trains
or scores differently from Tinker. Always applied.

1. ``token_sum_losses``: losses are sums over a datum's tokens, as Tinker's
   (``tests/service/test_compat_loss_sum.py``).
2. ``prompt_logprobs_per_token``: one prompt log-prob per prompt token, None for the
   first, and a batch that asks for them scored one sequence at a time
   (``tests/service/test_compat_sampling.py``).

Runs in the server venv without piexp (written out by piexp/service/compat/launcher.py).
"""


def token_sum_losses():
    # Tinker's losses are sums over a datum's tokens (importance_sampling is
    # -(ratio * advantages).sum()); skyrl __SKYRL_VERSION__ divides each sequence's sum by its
    # weight count, which for an RL datum (no weights: all ones) is its whole length. Two
    # episodes of one group then share the tokens they have in common with weights
    # A_i / L_i that no longer cancel (the advantages sum to zero, the A_i / L_i do not): a
    # short failing episode beside long passing ones pushes down the tool calls they all
    # made (in a learner-local run, about half the contrast's own weight in every
    # informative group; bench/learning.py). Each loss term is now multiplied by its
    # sequence's count, which skyrl's division takes off again, and the per-token losses a
    # client receives are divided by it (unchanged). skyrl's mean over a batch's sequences
    # stays: one factor for every gradient, which Adam's update does not see.
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


def prompt_logprobs_per_token():
    # A sample's prompt_logprobs are one entry per prompt token, None for the first (it has
    # no context): skyrl's own SampleOutput says so and the Tinker SDK's compute_logprobs
    # passes them on as such; tinker-cookbook's KL penalty against the base model
    # (algo.kl_penalty_coef) reads entry i as log p(token i | tokens before i)
    # (base_logprobs[1:]). skyrl __SKYRL_VERSION__'s JAX generator returns the n - 1 defined
    # entries without the None, so every entry was one token early and the KL penalty
    # stopped the run on a length mismatch. The None goes in front; the values are
    # unchanged. And a batch that asks for prompt log-probs is run one sequence at a time:
    # the generator holds the logits of every prompt position of the whole batch at once
    # ([batch, length, vocabulary] in float32: 16 x 2,048 x 8,218 is 1.1 GB for
    # learner-local and tiny-local, x 151,936 is 20 GB for a model of Qwen3's whole
    # vocabulary), which a KL penalty's 16 scored episodes reach at every step. Wraps
    # whatever sample the backend has (so it applies after speedups.power_of_two_batches,
    # whose padding then sees the limit of 1).
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


FIXES = {"token_sum_losses": token_sum_losses, "prompt_logprobs_per_token": prompt_logprobs_per_token}
