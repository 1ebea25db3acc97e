"""Every private name of the tinker SDK and of SkyRL that piexp patches or calls, as
:class:`~piexp.pinned_hooks.Pin` s, and the check that runs on every service path before
a run starts (:func:`check_service_pins`): tinker-cookbook's hooks and the SDK's on each,
SkyRL's too for ``service=local``, inside the server venv (once per venv and pin list:
a passed check is remembered under piexp's cache).

A new patch of third-party code goes where its job is (a SkyRL engine fix in
``skyrl_server/fixes.py``, a speed-up in ``skyrl_server/speedups.py``, the client proxy in
``proxy.py``, a tinker-cookbook hook in ``piexp/cookbook_compat.py``) and every name it
patches or calls goes here (or in ``cookbook_compat.HOOKS``), with the parameters it
relies on and, for a function it copies or rewrites, :func:`~piexp.pinned_hooks.source_sha256`
of the upstream source.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from piexp.errors import ThirdPartyMismatchError
from piexp.pinned_hooks import Hook, Pin, mismatch_paragraph, pin_problems, pin_to_json
from piexp.service.compat.versions import SKYRL_VERSION, TINKER_SDK_VERSION

SERVER = "piexp/service/compat/skyrl_server"

#: The tinker SDK's private names: the proxy's (SkyRL paths) and the loop's (every path).
TINKER_SDK = Pin(
    package="tinker",
    version=TINKER_SDK_VERSION,
    home="piexp/service/compat/pins.py",
    install=f"pip install tinker=={TINKER_SDK_VERSION}",
    hooks=(
        Hook("tinker.proto.tinker_public_pb2", "ForwardBackwardRequest",
             used_by="piexp/service/compat/proxy.py item 2"),
        Hook("tinker.lib.internal_client_holder", "InternalClientHolder.close", parameters=("self",),
             used_by="piexp/launch/loop.py (_end_client_sessions)"),
    ),
)  # fmt: skip

#: SkyRL's names the server-side code (skyrl_server/) patches or calls.
SKYRL = Pin(
    package="skyrl",
    version=SKYRL_VERSION,
    home="piexp/service/compat/pins.py",
    install="python -m piexp.service.local_venv --force",
    hooks=(
        # launching.py
        Hook("skyrl.backends.renderer", "torch", used_by=f"{SERVER}/launching.py item 1"),
        Hook("skyrl.tx.utils.models", "save_lora_checkpoint", source_sha256="f00b852bd0737406",
             used_by=f"{SERVER}/launching.py item 1 (peft.LoraConfig's stand-in)"),
        Hook("skyrl.tinker.api", "_build_uv_run_cmd_engine", parameters=("parent_cmd", "engine_config"),
             used_by=f"{SERVER}/launching.py item 2"),
        Hook("skyrl.tinker.api", "__main__", source_sha256="ddaac06a13b4c084", used_by=f"{SERVER}/launching.py item 2 (api)"),
        Hook("skyrl.tinker.api", "app", used_by=f"{SERVER}/launching.py item 2"),
        Hook("skyrl.tinker.api", "get_uvicorn_log_config", used_by=f"{SERVER}/launching.py item 2"),
        Hook("skyrl.tinker.api", "SKYRL_HTTP_CONNECTION_LIMIT", used_by=f"{SERVER}/launching.py item 2"),
        Hook("skyrl.tinker.api", "HTTP_KEEP_ALIVE_TIMEOUT_SECONDS", used_by=f"{SERVER}/launching.py item 2"),
        Hook("skyrl.tinker.config", "add_model", parameters=("parser", "model"),
             used_by=f"{SERVER}/launching.py item 2"),
        Hook("skyrl.tinker.config", "config_to_argv", parameters=("cfg",), used_by=f"{SERVER}/launching.py item 2"),
        # fixes.py
        Hook("skyrl.backends.jax", "LOSS_FUNCTIONS", used_by=f"{SERVER}/fixes.py item 1"),
        Hook("skyrl.backends.jax", "JaxBackendImpl._create_loss_and_grad_fn", parameters=("self",),
             source_sha256="1bf3832d8a28ac57", used_by=f"{SERVER}/fixes.py item 1, speedups.py item 1"),
        Hook("skyrl.backends.jax", "JaxBackendImpl.sample", parameters=("self", "prepared_batch"),
             used_by=f"{SERVER}/fixes.py item 2, speedups.py item 6"),
        Hook("skyrl.tx.utils.generator", "GeneratorMixin.generate", source_sha256="86a8b633e1903404",
             used_by=f"{SERVER}/fixes.py item 2 (the n - 1 prompt log-probs)"),
        Hook("skyrl.tinker.types", "SampleOutput", keywords=("sequences", "prompt_logprobs"),
             used_by=f"{SERVER}/fixes.py item 2"),
        Hook("skyrl.backends.jax", "JaxBackendConfig", keywords=("sample_max_num_sequences",),
             used_by=f"{SERVER}/fixes.py item 2, speedups.py item 6"),
        # speedups.py
        Hook("skyrl.tinker.types", "LOSS_TYPES", used_by=f"{SERVER}/speedups.py item 1"),
        Hook("skyrl.tx.utils.logits_processor", "LogitsProcessorMixin._compute_chunked_logprobs",
             parameters=("self", "hidden_states", "target_ids", "chunk_size", "adapter_indices"), source_sha256="e6949c47ee31f3a5",
             used_by=f"{SERVER}/speedups.py item 1"),
        Hook("skyrl.tx.utils.logits_processor", "LogitsProcessorMixin.logits_to_logprobs",
             parameters=("logits", "target_ids"), used_by=f"{SERVER}/speedups.py item 1"),
        Hook("skyrl.tx.utils.logits_processor", "LogitsProcessorMixin.get_lm_head", parameters=("self",),
             used_by=f"{SERVER}/speedups.py item 1"),
        Hook("skyrl.tx.layers.lora", "LoRALinear.apply_lora", parameters=("self", "x", "base_output", "adapter_indices"),
             source_sha256="3d966514751c9370", used_by=f"{SERVER}/speedups.py items 2 and 4"),
        Hook("skyrl.tx.layers.lora", "LoRAEmbed.apply_lora", parameters=("self", "x", "base_output", "adapter_indices"),
             used_by=f"{SERVER}/speedups.py item 4"),
        Hook("skyrl.tx.layers.attention", "dot_product_attention",
             parameters=("q", "k", "v", "attention_mask", "is_causal", "head_dim"), source_sha256="573ddb7ba8902357",
             used_by=f"{SERVER}/speedups.py item 3"),
        Hook("skyrl.tx.models.qwen3", "dot_product_attention", used_by=f"{SERVER}/speedups.py item 3"),
        Hook("skyrl.tx.utils.generator", "GeneratorMixin._prefill_and_decode", source_sha256="cd6660903a0db87d",
             used_by=f"{SERVER}/speedups.py item 5 (its draws and argmax)"),
        Hook("skyrl.tx.utils.generator", "jax", used_by=f"{SERVER}/speedups.py item 5"),
        Hook("skyrl.tx.utils.generator", "jnp", used_by=f"{SERVER}/speedups.py item 5"),
        Hook("skyrl.tinker.types", "PreparedSampleBatch",
             keywords=("all_model_inputs", "all_sampling_params", "all_model_ids", "all_checkpoint_ids",
                       "all_checkpoint_paths", "all_session_ids", "needs_prompt_logprobs"),
             used_by=f"{SERVER}/speedups.py item 6, fixes.py item 2"),
    ),
)  # fmt: skip


def _raise_for(pin: Pin, problems: list[str]) -> None:
    if problems:
        raise ThirdPartyMismatchError(mismatch_paragraph(pin, problems))


def _pinned_hooks_script(call: str) -> str:
    """piexp/pinned_hooks.py's text (the standard library only) and ``call``, for a
    script in the server venv."""
    import piexp.pinned_hooks

    text = Path(piexp.pinned_hooks.__file__).read_text(encoding="utf-8")
    return text.split('\nif __name__ == "__main__":')[0] + "\n" + call + "\n"


def skyrl_problems(python: Path | None = None, *, before: str = "") -> list[str]:
    """:data:`SKYRL`'s problems, found in the server venv (``python``: its interpreter)
    with skyrl's modules imported as the server imports them; ``before``: code run first
    (a test's way to move a hook)."""
    from piexp.service.compat.launcher import run_server_script

    script = _pinned_hooks_script(before + "\nreport_problems(sys.argv[2])")
    return run_server_script(script, [pin_to_json(SKYRL)], tag="PINS", python=python, timeout_s=300)


def skyrl_source_hashes(names: list[str], python: Path | None = None) -> dict[str, str]:
    """The source hash of each ``MODULE:NAME`` of skyrl, in the server venv."""
    from piexp.service.compat.launcher import run_server_script

    script = _pinned_hooks_script("report_hashes(sys.argv[2:])")
    return run_server_script(script, names, tag="HASHES", python=python, timeout_s=300)


def _check_skyrl(python: Path) -> None:
    # A passed check is remembered per server venv (its stamp and interpreter) and pin
    # list: importing skyrl's modules takes about 5 s, once per machine.
    from piexp.service.local_venv import STAMP
    from piexp.tokenizer import piexp_cache_dir

    venv = python.parent.parent
    try:
        stamp = (venv / STAMP).read_text(encoding="utf-8")
    except OSError:
        stamp = ""
    key = hashlib.sha256("\n".join((str(python), stamp, pin_to_json(SKYRL))).encode()).hexdigest()[:16]
    passed = piexp_cache_dir() / "pin-checks" / f"skyrl-{key}"
    if passed.is_file():
        return
    from piexp.service.compat.launcher import ServerScriptError

    try:
        problems = skyrl_problems(python)
    except ServerScriptError as error:  # the server's own imports failed before the check
        last = str(error).strip().splitlines()[-1]
        problems = [
            f"skyrl's modules cannot be imported as the server imports them ({last}), used by {SERVER}/launching.py"
        ]
    _raise_for(SKYRL, problems)
    passed.parent.mkdir(parents=True, exist_ok=True)
    passed.write_text(pin_to_json(SKYRL), encoding="utf-8")


def check_service_pins(*, proxy: bool, server_python: Path | None = None) -> None:
    """Refuse to start, with one paragraph naming the hook, unless every pinned hook of the
    service path fits: tinker-cookbook's and the tinker SDK's on every path (the SDK's
    version too where piexp's ``proxy`` stands in front of a SkyRL server: local, and
    selfhosted with service.compat_proxy), and, with ``server_python`` (service=local),
    SkyRL's in the server venv."""
    import dataclasses

    from piexp.cookbook_compat import check_installed_cookbook

    check_installed_cookbook(training=False)  # a training job checked training's hooks at its start
    sdk = TINKER_SDK if proxy else dataclasses.replace(TINKER_SDK, check_version=False)
    _raise_for(sdk, pin_problems(sdk))
    if server_python is not None:
        _check_skyrl(server_python)
