"""Every workaround piexp needs to train through SkyRL's Tinker-compatible server, each
pinned to the versions it was made for and checked at start-up (``versions.py``:
:data:`SKYRL_VERSION` on the server, :data:`TINKER_SDK_VERSION` on the client,
:func:`check_versions` refuses anything else with a :class:`~piexp.errors.UserError`), so
an upgrade is a deliberate act (re-check each item below, then bump the pins) and never
a silent mis-training.

Server side, in ``skyrl_launcher.py`` (code run by the server venv's own interpreter,
written out by ``launcher.py``'s :func:`write_launcher`):

1. **No torch on CPU** (``_import_without_torch``). skyrl 0.4.0's JAX path imports
   ``torch`` at module level in ``skyrl/backends/renderer.py`` (used only for multimodal
   inputs) and ``peft`` in ``skyrl/tx/utils/models.py`` (only
   ``peft.LoraConfig(...).save_pretrained`` to write ``adapter_config.json`` next to a
   LoRA export). ``peft`` pulls torch, and on Python 3.12 PyPI only has the CUDA torch
   build (about 6.7 GB with its nvidia libraries). The launcher imports those two skyrl
   modules with small stand-in ``torch`` / ``peft`` modules in ``sys.modules`` and
   removes the stand-ins again right after, so nothing else sees a torch (transformers
   has already decided it has none). A multimodal request fails with a clear message;
   the stand-in ``LoraConfig`` writes the same ``adapter_config.json`` fields peft would.
2. **No ``uv run``** (``_api``). The API server builds the engine command as ``uv run ...
   -m skyrl.tinker.engine`` from its parent's command line and refuses to start
   otherwise; the launcher replaces that one function so the engine runs with the same
   interpreter (through this launcher again).
3. **No orphans** (``_die_with_parent``). Each server process asks the kernel for SIGKILL
   when its parent dies (``PR_SET_PDEATHSIG``), so killing piexp (even with SIGKILL)
   takes the API server and its engine with it.
6. **CPU speed** (engine only, ``_cpu_training_speedups``): on a CPU a training step was
   almost all vocabulary-wide log-softmax at positions without a loss, the transpose of
   ``jax.lax.ragged_dot`` in the LoRA layers, and the masked half of causal attention.
   The launcher (a) marks the positions a ``forward_backward`` does not need and skips
   log-prob chunks without any, (b) computes LoRA with plain matmuls, (c) computes
   causal attention in query blocks of 128 that see only the keys up to their end, and
   skips a block in which every row is padding (a prompt or sequence padded up to its
   length bucket; a sample call's prefill is mostly this attention). Log-probs
   at loss positions, losses, gradients and greedy tokens are unchanged
   (``tests/service/test_compat_speedups.py``); figures in ``bench/local_service.py``
   and ``bench/sample_call.py``.
7. **CPU sampling speed** (engine only, ``_cpu_sampling_speedups``): a decode step was
   almost all ``jax.random.categorical`` (a threefry Gumbel draw per vocabulary entry,
   then an argmax that XLA's CPU backend runs as an unvectorized variadic reduce), and
   every distinct number of pending sample requests compiled the whole prefill + decode
   program again. In skyrl's generator module only, the categorical is drawn in two
   levels by inverse CDF (a block of 1,024 entries by its mass, then an entry within it:
   the same distribution, two uniforms per draw) and argmax is a max and a min; sample
   batches are padded with copies of their first sample to the next power of two
   (within ``sample_max_num_sequences``), as skyrl already buckets lengths. Greedy
   tokens and log-probs are unchanged and draws match softmax probabilities
   (``tests/service/test_compat_sampling.py``).
8. **Untrained LoRA layers** (engine only, ``_skip_untrained_lora``): skyrl's
   ``create_model`` never trains the embedding or the unembedding, but both carry a LoRA
   of the server's max rank (scaling 0) that every training step and sampled token
   computed; a layer no adapter of the batch trains now skips it (values unchanged:
   ``tests/service/test_compat_speedups.py``; figures in ``bench/untrained_lora.py``).
9. **Losses summed over tokens** (engine only, ``_token_sum_losses``): Tinker's losses
   are sums over a datum's tokens (``-(ratio * advantages).sum()`` for
   importance_sampling); skyrl 0.4.0 divides each sequence's sum by its weight count,
   for an RL datum (no weights) its whole length. The advantages of a group sum to zero,
   the advantages over lengths do not: the tokens all its episodes share (their tool
   calls) were pushed the way of the shorter episodes, down when failing episodes end
   sooner than passing ones (in a learner-local run, about half the contrast's own
   weight in every informative group; bench/learning.py). Each loss term is multiplied
   by its sequence's count, which skyrl's division takes off again; the per-token
   losses and log-probs a client receives are unchanged
   (``tests/service/test_compat_loss_sum.py``). skyrl's mean over a batch's sequences
   stays: one factor for every gradient, which Adam's update does not see.
11. **Prompt log-probs, one per prompt token** (engine only,
    ``_prompt_logprobs_per_token``): skyrl's ``SampleOutput`` and the Tinker SDK's
    ``compute_logprobs`` give one entry per prompt token, None for the first;
    tinker-cookbook's KL penalty (``algo.kl_penalty_coef``) reads entry i as the log-prob
    of token i. skyrl 0.4.0's JAX generator returns the n - 1 defined entries without
    the None, so a run with a KL penalty stopped at its first step on a length mismatch
    (and any other reader was one token off). The None goes in front, the values stay.
    A batch that asks for prompt log-probs runs one sequence at a time: the generator
    holds the logits of every prompt position of its whole batch at once (a KL penalty
    scores a step's 16 episodes together: 1.1 GB for learner-local, 20 GB for tiny-local)
    (``tests/service/test_compat_sampling.py``).
12. **Prefix KV cache** (engine only, ``_prefix_kv_cache``; opt-in:
    ``service.prefix_cache=true``): an agent's every turn sends its whole conversation
    again, and skyrl prefills each prompt from its first token. With it the engine keeps
    the keys and values of the sequences it sampled (prompt and sampled tokens, per
    adapter, up to 262,144 tokens) and prefills only what follows a prompt's longest kept
    prefix, up to 256 new tokens (a turn continues its episode's previous turn; a new
    episode, the system prompt every episode shares), with a query mask over the kept and
    new keys. Any change to an adapter's weights drops every kept prefix; a prompt whose
    log-probs are asked for, a batch with a longer suffix, and a model other than Qwen3
    prefill in full. Tokens and log-probs are a full prefill's to float rounding, a turn
    with nothing kept is skyrl's to the bit (``tests/service/test_compat_prefix_cache.py``).
    Off by default: on learner-local an eval takes about 0.9x as long, the whole loop
    (whose first turns after each weight update have nothing kept, and whose calls are
    mostly decode) as long as without it, and the rounding changes some sampled tokens
    (``bench/prefix_cache.py``).

Client side, in ``proxy.py`` (:class:`SampleIdProxy`, in piexp's process):

4. **``sample_sequence_ids``.** The tinker SDK 0.38 asserts that every ``/api/v1/asample``
   promise carries one sequence id per requested sample; skyrl 0.4.0 replies without
   them. A small loopback reverse proxy in front of the server passes every request
   through and adds ``["<seq_id>-<i>", ...]`` to ``asample`` replies that lack them.
5. **Create-via-load.** SDK 0.38 resumes a training client (``create_training_client_
   from_state[_with_optimizer]``) with one ``load_weights`` request addressed by
   ``session_id`` + ``model_seq_id`` and then calls the model
   ``"<session_id>:train:<model_seq_id>"``; skyrl 0.4.0 only knows the legacy order
   (``create_model``, then ``load_weights`` with the returned ``model_id``). The proxy
   turns the former into the latter (rank and base model from the checkpoint's training
   run) and maps the SDK's model id to skyrl's in every later request and reply.
10. **Seeds** (:class:`~piexp.service.compat.proxy.RequestSeeds`): tinker SDK 0.38 has
    no sampling seed and tinker-cookbook 0.5.8 sends no LoRA seed, so skyrl drew both at
    random and one command gave another training curve each time. The proxy gives a
    sampling request without a seed one from the run's ``seed``, the request's content
    and how many alike requests came before (a group's episodes send the same first
    prompt and draw differently; which arrives first does not matter, they are alike),
    and a LoRA without a seed the run's. A request that carries a seed keeps it. A
    resumed run's counts start again, so it samples differently from an uninterrupted
    one from the resume on.
"""

from __future__ import annotations

from piexp.service.compat.launcher import launcher_preamble, launcher_source, write_launcher
from piexp.service.compat.proxy import SampleIdProxy, add_sample_sequence_ids
from piexp.service.compat.versions import SKYRL_VERSION, TINKER_SDK_VERSION, CompatVersionError, check_versions

__all__ = [
    "SKYRL_VERSION",
    "TINKER_SDK_VERSION",
    "CompatVersionError",
    "SampleIdProxy",
    "add_sample_sequence_ids",
    "check_versions",
    "launcher_preamble",
    "launcher_source",
    "write_launcher",
]
