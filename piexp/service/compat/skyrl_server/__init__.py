"""piexp's code in the SkyRL server (skyrl __SKYRL_VERSION__), by job: starting the server
(``launching.py``), correctness fixes (``fixes.py``), CPU speed-ups, each its own flag
(``speedups.py``). It runs in the server venv's own interpreter, which has no piexp:
piexp/service/compat/launcher.py writes this package out as ``piexp_skyrl_server`` next
to a ``launcher.py`` entry point, with the pinned skyrl version filled in; its modules
import only each other. Every skyrl name they patch or call is listed, with its
parameters and, for the functions copied or rewritten here, a hash of skyrl's source, in
piexp/service/compat/pins.py, and checked before a server starts.

:data:`ENGINE_PATCHES` is the one order the engine applies them in: three skyrl targets
are wrapped twice, and the later one must wrap the earlier.
"""

import os

from . import fixes, launching, speedups  # noqa: F401  (launching: for the entry point and scripts)

#: Every engine patch, in the order applied (the correctness fixes always, the
#: speed-ups named by ``PIEXP_SKYRL_SPEEDUPS``). Wrapped twice, in this order:
#: ``JaxBackendImpl._create_loss_and_grad_fn`` (token_sum_losses, then needed_logprobs: the
#: two commute), ``LoRALinear.apply_lora`` (lora_matmuls replaces it, untrained_lora wraps
#: what is there), ``JaxBackendImpl.sample`` (power_of_two_batches, then
#: prompt_logprobs_per_token, whose limit of one sequence the padding must see).
ENGINE_PATCHES = (
    ("token_sum_losses", fixes.token_sum_losses),
    ("needed_logprobs", speedups.needed_logprobs),
    ("lora_matmuls", speedups.lora_matmuls),
    ("blocked_attention", speedups.blocked_attention),
    ("untrained_lora", speedups.untrained_lora),
    ("sampling_draws", speedups.sampling_draws),
    ("power_of_two_batches", speedups.power_of_two_batches),
    ("prompt_logprobs_per_token", fixes.prompt_logprobs_per_token),
)


def apply(*names):
    """Apply the named engine patches, in :data:`ENGINE_PATCHES`'s order."""
    unknown = set(names) - {name for name, _ in ENGINE_PATCHES}
    if unknown:
        raise ValueError(f"no engine patch named {', '.join(sorted(unknown))}")
    for name, patch in ENGINE_PATCHES:
        if name in names:
            patch()


def engine_patches():
    """Everything the engine applies before it starts (also what a check or bench script
    applies to measure the engine as it runs): every fix, and the speed-ups
    ``PIEXP_SKYRL_SPEEDUPS`` names (all by default)."""
    apply(*fixes.FIXES, *speedups.enabled(os.environ.get("PIEXP_SKYRL_SPEEDUPS")))
