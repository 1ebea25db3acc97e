"""The client side of piexp's SkyRL workarounds: :class:`SampleIdProxy`, a loopback
reverse proxy in piexp's own process that passes every request through to the
Tinker-compatible server and fixes what the tinker SDK and skyrl disagree on:

1. **``sample_sequence_ids``.** The tinker SDK 0.38 asserts that every ``/api/v1/asample``
   promise carries one sequence id per requested sample; skyrl 0.4.0 replies without
   them. The proxy adds ``["<seq_id>-<i>", ...]`` to ``asample`` replies that lack them.
2. **Create-via-load.** SDK 0.38 resumes a training client (``create_training_client_
   from_state[_with_optimizer]``) with one ``load_weights`` request addressed by
   ``session_id`` + ``model_seq_id`` and then calls the model
   ``"<session_id>:train:<model_seq_id>"``; skyrl 0.4.0 only knows the legacy order
   (``create_model``, then ``load_weights`` with the returned ``model_id``). The proxy
   turns the former into the latter (rank and base model from the checkpoint's training
   run) and maps the SDK's model id to skyrl's in every later request and reply.
3. **Seeds** (:class:`RequestSeeds`): tinker SDK 0.38 has no sampling seed and
   tinker-cookbook 0.5.8 sends no LoRA seed, so skyrl drew both at random and one command
   gave another training curve each time. The proxy gives a sampling request without a
   seed one from the run's ``seed``, the request's content and how many alike requests
   came before (a group's episodes send the same first prompt and draw differently; which
   arrives first does not matter, they are alike), and a LoRA without a seed the run's. A
   request that carries a seed keeps it. A resumed run's counts start again, so it
   samples differently from an uninterrupted one from the resume on.

The tinker SDK names it uses are pinned in ``pins.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterable
from typing import Any

ASAMPLE_PATH = "/api/v1/asample"
LOAD_WEIGHTS_PATH = "/api/v1/load_weights"
CREATE_MODEL_PATH = "/api/v1/create_model"


class RequestSeeds:
    """Item 3: a seed for every request the SDK sends without one, from the run's seed.

    tinker SDK 0.38 has no sampling seed and tinker-cookbook 0.5.8 sends no LoRA seed, so
    skyrl draws both at random and one command gives another curve each time. A sampling
    request's seed comes from the run's seed, the request's content (prompt, sampling
    parameters, number of samples) and how many requests with that content came before:
    the episodes of a group send the same first prompt and get different draws, and
    which of them arrives first does not matter, since they are alike. A LoRA without a
    seed gets the run's."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._seen: dict[str, int] = {}  # request content digest -> requests with it so far

    def sample(self, body: bytes) -> bytes:
        data = _json_object(body)
        params = data.get("sampling_params") if data else None
        if data is None or not isinstance(params, dict) or params.get("seed") is not None:
            return body
        content = json.dumps(
            {"prompt": data.get("prompt"), "params": params, "samples": data.get("num_samples", 1)}, sort_keys=True
        )
        digest = hashlib.sha256(content.encode()).hexdigest()
        occurrence = self._seen.get(digest, 0)
        self._seen[digest] = occurrence + 1
        drawn = hashlib.sha256(f"{self.seed}:{digest}:{occurrence}".encode()).digest()
        params["seed"] = int.from_bytes(drawn[:4], "big") & 0x7FFFFFFF
        return json.dumps(data).encode()

    def create_model(self, body: bytes) -> bytes:
        data = _json_object(body)
        lora = data.get("lora_config") if data else None
        if data is None or not isinstance(lora, dict) or lora.get("seed") is not None:
            return body
        lora["seed"] = self.seed
        return json.dumps(data).encode()


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


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
    """A loopback reverse proxy for ``upstream`` that fixes ``asample`` replies (item 1).

    Runs an aiohttp server on its own event loop in a daemon thread of this process, so
    it lives exactly as long as the run that uses it. ``url`` is where clients connect.
    """

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0, seed: int | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        # Item 3 (None: the server's chance, as the SDK leaves it).
        self.seeds = RequestSeeds(seed) if seed is not None else None
        self.host = host
        self.port = port
        self.rewritten = 0  # asample replies that got ids (for tests and logs)
        self.aliases: dict[str, str] = {}  # SDK model id -> skyrl model id (item 2)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._session: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _to_upstream_body(self, body: bytes, headers: dict[str, str]) -> bytes:
        """Map an SDK model id in a request body to skyrl's (item 2): JSON bodies, and the
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
        """Item 2: create the model the legacy way, then load into it."""
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
        if self.seeds is not None and request.method == "POST":
            if request.path == ASAMPLE_PATH:
                body = self.seeds.sample(body)
            elif request.path == CREATE_MODEL_PATH:
                body = self.seeds.create_model(body)
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
