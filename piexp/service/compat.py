"""Every workaround piexp needs to train through SkyRL's Tinker-compatible server.

All of them are pinned to the versions they were made for (:data:`SKYRL_VERSION` on the
server, :data:`TINKER_SDK_VERSION` on the client) and :func:`check_versions` refuses
anything else at start-up with a :class:`~piexp.errors.UserError`, so an upgrade is a
deliberate act (re-check each item below, then bump the pins) and never a silent
mis-training.

Server side (code run by the server venv's own interpreter, see :data:`LAUNCHER_SOURCE`):

1. **No torch on CPU.** skyrl 0.4.0's JAX path imports ``torch`` at module level in
   ``skyrl/backends/renderer.py`` (used only for multimodal inputs) and ``peft`` in
   ``skyrl/tx/utils/models.py`` (only ``peft.LoraConfig(...).save_pretrained`` to write
   ``adapter_config.json`` next to a LoRA export). ``peft`` pulls torch, and on Python
   3.12 PyPI only has the CUDA torch build (about 6.7 GB with its nvidia libraries).
   The launcher imports those two skyrl modules with small stand-in ``torch`` / ``peft``
   modules in ``sys.modules`` and removes the stand-ins again right after, so nothing
   else sees a torch (transformers has already decided it has none). A multimodal
   request fails with a clear message; the stand-in ``LoraConfig`` writes the same
   ``adapter_config.json`` fields peft would.
2. **No ``uv run``.** The API server builds the engine command as ``uv run ... -m
   skyrl.tinker.engine`` from its parent's command line and refuses to start otherwise;
   the launcher replaces that one function so the engine runs with the same
   interpreter (through this launcher again).
3. **No orphans.** Each server process asks the kernel for SIGKILL when its parent dies
   (``PR_SET_PDEATHSIG``), so killing piexp (even with SIGKILL) takes the API server and
   its engine with it.

6. **CPU speed** (engine only, ``_cpu_training_speedups``): on a CPU a training step was
   almost all vocabulary-wide log-softmax at positions without a loss, the transpose of
   ``jax.lax.ragged_dot`` in the LoRA layers, and the masked half of causal attention.
   The launcher (a) marks the positions a ``forward_backward`` does not need and skips
   log-prob chunks without any, (b) computes LoRA with plain matmuls, (c) computes
   causal attention in query blocks that see only the keys up to their end. Log-probs
   at loss positions, losses and gradients are unchanged
   (``tests/service/test_compat_speedups.py``); figures in ``bench/local_service.py``.
7. **CPU sampling speed** (engine only, ``_cpu_sampling_speedups``): a decode step was
   almost all ``jax.random.categorical`` (a threefry Gumbel draw per vocabulary entry,
   then an argmax that XLA's CPU backend runs as an unvectorized variadic reduce), and
   every distinct number of pending sample requests compiled the whole prefill + decode
   program again. In skyrl's generator module only, the categorical is drawn in two levels
   by inverse CDF (a block of 1,024 entries by its mass, then an entry within it: the same
   distribution, two uniforms per draw) and argmax is a max and a min; sample batches are
   padded with copies of their first sample to the next power of two (within
   ``sample_max_num_sequences``), as skyrl already buckets lengths. Greedy tokens and
   log-probs are unchanged and draws match softmax probabilities
   (``tests/service/test_compat_sampling.py``).

Client side (:class:`SampleIdProxy`, in piexp's process):

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
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from piexp.errors import UserError

__all__ = [
    "LAUNCHER_SOURCE",
    "SKYRL_VERSION",
    "TINKER_SDK_VERSION",
    "SampleIdProxy",
    "add_sample_sequence_ids",
    "check_versions",
    "write_launcher",
]

#: The skyrl release every server-side workaround was made for.
SKYRL_VERSION = "0.4.0"
#: The tinker SDK release (piexp's own venv, via tinker-cookbook) the proxy was made for.
TINKER_SDK_VERSION = "0.38.0"

ASAMPLE_PATH = "/api/v1/asample"
LOAD_WEIGHTS_PATH = "/api/v1/load_weights"


class CompatVersionError(UserError):
    """The installed SkyRL server or tinker SDK is not the version piexp's workarounds fit."""


def _installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check_versions(server_versions: dict[str, str | None], *, sdk_version: str | None = None) -> None:
    """Refuse to run unless the server venv has skyrl :data:`SKYRL_VERSION` and this
    process has tinker SDK :data:`TINKER_SDK_VERSION`.

    ``server_versions`` maps package names to the versions installed in the server venv
    (as read by :func:`piexp.service.local_venv.server_versions`); ``sdk_version``
    defaults to this process's installed ``tinker``.
    """
    problems: list[str] = []
    skyrl = server_versions.get("skyrl")
    if skyrl != SKYRL_VERSION:
        problems.append(f"the server has skyrl {skyrl or 'not installed'}, expected {SKYRL_VERSION}")
    sdk = sdk_version if sdk_version is not None else _installed("tinker")
    if sdk != TINKER_SDK_VERSION:
        problems.append(f"piexp's environment has tinker SDK {sdk or 'not installed'}, expected {TINKER_SDK_VERSION}")
    if problems:
        raise CompatVersionError(
            "The self-hosted training server cannot be used safely: "
            + "; ".join(problems)
            + ". piexp's SkyRL workarounds (piexp/service/compat.py) are pinned to those versions. "
            "Recreate the server environment with `python -m piexp.service.local_venv --force`, or, "
            "after re-checking each workaround against the new versions, update the pins."
        )


# --------------------------------------------------------------------------- proxy


def add_sample_sequence_ids(request_body: bytes, reply: Any) -> Any:
    """The ``asample`` reply with one ``sample_sequence_ids`` entry per requested sample.

    Ids are ``"<seq_id>-<i>"`` from the request (the SDK's per-client request counter),
    prefixed by the reply's ``request_id`` so they are unique per server. A reply that
    already has them, is not a dict, or a request that is not JSON is returned unchanged.
    """
    if not isinstance(reply, dict) or reply.get("sample_sequence_ids"):
        return reply
    try:
        request = json.loads(request_body or b"{}")
    except ValueError:
        return reply
    if not isinstance(request, dict):
        return reply
    count = int(request.get("num_samples") or 1)
    prefix = f"{reply.get('request_id', 'req')}:{request.get('seq_id', 0)}"
    return {**reply, "sample_sequence_ids": [f"{prefix}-{i}" for i in range(count)]}


_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
     "transfer-encoding", "upgrade", "content-length", "host"}
)  # fmt: skip


def _forward_headers(headers: Iterable[tuple[str, str]], *, request: bool = False) -> dict[str, str]:
    """Headers to pass on. A request body is passed as it came (its Content-Encoding
    stays); a reply body was decompressed by the proxy's client, so its encoding goes."""
    drop = _HOP_HEADERS if request else _HOP_HEADERS | {"content-encoding"}
    return {k: v for k, v in headers if k.lower() not in drop}


class SampleIdProxy:
    """A loopback reverse proxy for ``upstream`` that fixes ``asample`` replies (item 4).

    Runs an aiohttp server on its own event loop in a daemon thread of this process, so
    it lives exactly as long as the run that uses it. ``url`` is where clients connect.
    """

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.host = host
        self.port = port
        self.rewritten = 0  # asample replies that got ids (for tests and logs)
        self.aliases: dict[str, str] = {}  # SDK model id -> skyrl model id (item 5)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._session: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _to_upstream_body(self, body: bytes, headers: dict[str, str]) -> bytes:
        """Map an SDK model id in a request body to skyrl's (item 5): JSON bodies, and the
        protobuf (optionally zstd-compressed) body of ``forward_backward``."""
        if not self.aliases or not body:
            return body
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if "protobuf" in content_type:
            import zstandard
            from tinker.proto import tinker_public_pb2 as public_pb

            encoding_key = next((k for k in headers if k.lower() == "content-encoding"), None)
            raw = body
            if encoding_key and headers[encoding_key].lower() == "zstd":
                raw = zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 31)
            message = public_pb.ForwardBackwardRequest()
            try:
                message.ParseFromString(raw)
            except Exception:  # noqa: BLE001 - not a forward_backward body: pass it on
                return body
            if message.model_id not in self.aliases:
                return body
            message.model_id = self.aliases[message.model_id]
            if encoding_key:
                del headers[encoding_key]
            return message.SerializeToString()
        try:
            data = json.loads(body)
        except ValueError:
            return body
        if isinstance(data, dict) and data.get("model_id") in self.aliases:
            data["model_id"] = self.aliases[data["model_id"]]
            return json.dumps(data).encode()
        return body

    def _to_client_payload(self, payload: bytes) -> bytes:
        if not self.aliases or not payload:
            return payload
        reverse = {real: alias for alias, real in self.aliases.items()}
        try:
            data = json.loads(payload)
        except ValueError:
            return payload
        if isinstance(data, dict) and data.get("model_id") in reverse:
            data["model_id"] = reverse[data["model_id"]]
            return json.dumps(data).encode()
        return payload

    def _to_upstream_path(self, path_qs: str) -> str:
        from urllib.parse import quote

        for alias, real in self.aliases.items():
            path_qs = path_qs.replace(quote(alias, safe=""), real).replace(alias, real)
        return path_qs

    async def _json(self, method: str, path: str, payload: dict[str, Any] | None = None) -> tuple[int, Any]:
        async with self._session.request(method, self.upstream + path, json=payload) as reply:
            text = await reply.read()
            try:
                return reply.status, json.loads(text)
            except ValueError:
                return reply.status, text.decode(errors="replace")

    async def _create_via_load(self, request: Any, data: dict[str, Any]) -> Any:
        """Item 5: create the model the legacy way, then load into it."""
        from aiohttp import web

        path = str(data.get("path", ""))
        source = path.removeprefix("tinker://").split("/", 1)[0]
        status, run = await self._json("GET", f"/api/v1/training_runs/{source}")
        if status != 200 or not isinstance(run, dict):
            return web.json_response({"detail": f"piexp proxy: checkpoint run {source!r}: {run}"}, status=status)
        status, created = await self._json(
            "POST",
            "/api/v1/create_model",
            {
                "session_id": data["session_id"],
                "base_model": data.get("base_model") or run["base_model"],
                "lora_config": {"rank": int(run.get("lora_rank") or 32)},
            },
        )
        if status != 200 or not isinstance(created, dict):
            return web.json_response({"detail": f"piexp proxy: create_model: {created}"}, status=status)
        alias = f"{data['session_id']}:train:{data['model_seq_id']}"
        self.aliases[alias] = created["model_id"]
        status, loaded = await self._json(
            "POST",
            "/api/v1/load_weights",
            {"model_id": created["model_id"], "path": path, "optimizer": bool(data.get("optimizer", True)),
             "type": "load_weights"},
        )  # fmt: skip
        if isinstance(loaded, dict) and loaded.get("model_id") == created["model_id"]:
            loaded["model_id"] = alias
        return web.json_response(loaded, status=status)

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.read()
        if request.method == "POST" and request.path == LOAD_WEIGHTS_PATH:
            try:
                data = json.loads(body)
            except ValueError:
                data = None
            if isinstance(data, dict) and not data.get("model_id") and data.get("session_id"):
                return await self._create_via_load(request, data)
        request_headers = _forward_headers(request.headers.items(), request=True)
        body = self._to_upstream_body(body, request_headers)
        target = self.upstream + self._to_upstream_path(request.rel_url.raw_path_qs)
        import aiohttp

        try:
            async with self._session.request(
                request.method, target, data=body, headers=request_headers, allow_redirects=False
            ) as upstream:
                payload = await upstream.read()
                headers = _forward_headers(upstream.headers.items())
                status = upstream.status
                content_type = upstream.headers.get("Content-Type", "")
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            # The server is gone or restarting: answer like a gateway, without a traceback.
            return web.json_response({"detail": f"piexp proxy: upstream unavailable ({error})"}, status=502)
        if request.method == "POST" and request.path == ASAMPLE_PATH and status == 200 and "json" in content_type:
            try:
                reply = json.loads(payload)
            except ValueError:
                reply = None
            fixed = add_sample_sequence_ids(body, reply)
            if fixed is not reply:
                self.rewritten += 1
                payload = json.dumps(fixed).encode()
        if "json" in content_type:
            payload = self._to_client_payload(payload)
        return web.Response(body=payload, status=status, headers=headers)

    async def _start(self) -> None:
        import aiohttp
        from aiohttp import web

        # No total time-out: the SDK long-polls futures; it has its own time-outs.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30), auto_decompress=True
        )
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def start(self) -> SampleIdProxy:
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start())
            except BaseException as error:  # noqa: BLE001 - re-raised in start()
                failure.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._stop())
            loop.close()

        self._thread = threading.Thread(target=serve, name="piexp-skyrl-proxy", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._thread = None

    def __enter__(self) -> SampleIdProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- launcher

#: Run by the server venv's interpreter: ``python launcher.py api|engine [skyrl args]``.
#: It must not import piexp (not installed there). Items 1-3 of the module docstring.
LAUNCHER_SOURCE = r'''
"""piexp's launcher for skyrl {skyrl_version}'s Tinker API server and engine (generated by
piexp/service/compat.py; do not edit: it is rewritten when it differs)."""
import ctypes
import json
import os
import signal
import sys
import types

EXPECTED_SKYRL = "{skyrl_version}"


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: SIGKILL this process when its parent dies.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    expected = os.environ.get("PIEXP_SERVER_PARENT_PID")
    if expected and os.getppid() != int(expected):
        sys.exit("piexp launcher: parent exited before the server started")


def _import_without_torch():
    from importlib.metadata import version

    got = version("skyrl")
    if got != EXPECTED_SKYRL:
        sys.exit(f"piexp launcher: skyrl {{got}} installed, this launcher is for {{EXPECTED_SKYRL}}")
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
                base_model_name_or_path=base_model_name_or_path, r=r, lora_alpha=lora_alpha,
                peft_type="LORA", task_type="CAUSAL_LM", target_modules=None, lora_dropout=0.0,
                bias="none", inference_mode=True, **extra,
            )

        def save_pretrained(self, directory, **_kwargs):
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(str(directory), "adapter_config.json"), "w") as handle:
                json.dump(self.fields, handle, indent=2)

    peft.LoraConfig = LoraConfig
    saved = {{name: sys.modules.get(name) for name in ("torch", "peft")}}
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

        def forward_backward_needed_only(accumulated, lora, non_lora, input_ids, attention_mask, adapter_indices,
                                         target_ids, loss_mask, loss_fn_types, sampling_logprobs, advantages,
                                         loss_fn_config):
            targets = needed_targets(target_ids, attention_mask, loss_mask, advantages, sampling_logprobs,
                                     loss_fn_types)
            return fused(accumulated, lora, non_lora, input_ids, attention_mask, adapter_indices, targets,
                         loss_mask, loss_fn_types, sampling_logprobs, advantages, loss_fn_config)

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

        chunked = (flat_hidden.reshape(chunks, chunk_size, hidden), flat_targets.reshape(chunks, chunk_size),
                   adapters.reshape(chunks, chunk_size))
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
        flat = x.reshape(-1, *x.shape[base_output.ndim - 1:])
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
    # that is the largest cost left in a step. Query blocks that only see the keys up to
    # their own end compute half of it (same values, to float rounding).
    import skyrl.tx.models.qwen3 as qwen3_module
    from skyrl.tx.layers import attention as attention_module

    original_attention = attention_module.dot_product_attention
    query_block = 512

    def causal_attention_in_blocks(q, k, v, attention_mask, is_causal, head_dim):
        length = q.shape[1]
        if jax.default_backend() != "cpu" or not is_causal or k.shape[1] != length or length <= query_block:
            return original_attention(q, k, v, attention_mask, is_causal, head_dim)
        outputs = []
        for start in range(0, length, query_block):
            end = min(start + query_block, length)
            causal = jnp.arange(end)[None, :] <= jnp.arange(start, end)[:, None]
            mask = attention_mask[:, None, None, :end].astype(bool) & causal[None, None]
            outputs.append(jax.nn.dot_product_attention(
                q[:, start:end], k[:, :end], v[:, :end], scale=1.0 / head_dim**0.5, mask=mask))
        return jnp.concatenate(outputs, axis=1)

    qwen3_module.dot_product_attention = causal_attention_in_blocks
    jax_backend.JaxBackendImpl._create_loss_and_grad_fn = create_loss_and_grad_fn
    LogitsProcessorMixin._compute_chunked_logprobs = chunked_logprobs


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
        padded = prepared_batch.model_copy(update={{
            name: getattr(prepared_batch, name) + [getattr(prepared_batch, name)[0]] * extra
            for name in ("all_model_inputs", "all_sampling_params", "all_model_ids", "all_checkpoint_ids",
                         "all_checkpoint_paths", "all_session_ids")}})
        return original_sample(self, padded)

    jax_backend.JaxBackendImpl.sample = sample_in_power_of_two_batches


def _engine():
    import runpy

    runpy.run_module("skyrl.tinker.engine", run_name="__main__", alter_sys=True)


def _api():
    import argparse

    import uvicorn
    from skyrl.tinker import api
    from skyrl.tinker.config import EngineConfig, add_model, config_to_argv

    def engine_command(_parent_cmd, engine_config):
        return [sys.executable, os.path.abspath(__file__), "engine", *config_to_argv(engine_config)]

    api._build_uv_run_cmd_engine = engine_command
    # The same start-up as skyrl/tinker/api.py's __main__ block (skyrl {skyrl_version}).
    parser = argparse.ArgumentParser(description="SkyRL tinker API server (piexp launcher)")
    add_model(parser, EngineConfig)
    parser.add_argument("--host", type=str, default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    # A socket piexp bound and listens on before starting us: no window in which another
    # process could take the port (or answer piexp's readiness probe in our stead).
    parser.add_argument("--listen-fd", type=int, default=None)
    args = parser.parse_args()
    engine_config = EngineConfig.model_validate({{k: v for k, v in vars(args).items() if k in EngineConfig.model_fields}})
    api.app.state.engine_config = engine_config
    config = uvicorn.Config(
        api.app, host=args.host, port=args.port, log_config=api.get_uvicorn_log_config(),
        backlog=api.SKYRL_HTTP_CONNECTION_LIMIT, timeout_keep_alive=api.HTTP_KEEP_ALIVE_TIMEOUT_SECONDS,
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
        _cpu_training_speedups()
        _cpu_sampling_speedups()
        _engine()
    elif role == "api":
        _api()
    else:
        sys.exit(f"piexp launcher: unknown role {{role!r}}")
'''.format(skyrl_version=SKYRL_VERSION)


def write_launcher(directory: Path) -> Path:
    """Write :data:`LAUNCHER_SOURCE` into ``directory`` (only when it differs) and
    return its path; the file name carries a content hash."""
    digest = hashlib.sha256(LAUNCHER_SOURCE.encode()).hexdigest()[:12]
    path = directory / f"piexp_skyrl_launcher_{digest}.py"
    if not path.is_file() or path.read_text(encoding="utf-8") != LAUNCHER_SOURCE:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(LAUNCHER_SOURCE, encoding="utf-8")
        tmp.replace(path)
    return path
