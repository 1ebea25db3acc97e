"""Fast tests of the SkyRL workarounds (no server venv needed): the proxy adds
`sample_sequence_ids`, maps create-via-load, the launcher is written out complete and
without piexp, and the removed prefix cache is refused by its key."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator

import pytest

from piexp.service import LOCAL_API_KEY, placeholder_api_key
from piexp.service.compat import (
    SKYRL_VERSION,
    TINKER_SDK_VERSION,
    SampleIdProxy,
    add_sample_sequence_ids,
    launcher_files,
    write_launcher,
)


def test_adds_one_id_per_requested_sample() -> None:
    reply = {"request_id": "7", "model_id": None}
    fixed = add_sample_sequence_ids(json.dumps({"num_samples": 3, "seq_id": 5}).encode(), reply)
    assert fixed["sample_sequence_ids"] == ["7:5-0", "7:5-1", "7:5-2"]
    assert len(set(fixed["sample_sequence_ids"])) == 3


def test_keeps_ids_the_server_sent_and_odd_bodies() -> None:
    reply = {"request_id": "1", "sample_sequence_ids": ["a"]}
    assert add_sample_sequence_ids(b'{"num_samples": 1}', reply) is reply
    assert add_sample_sequence_ids(b"not json", {"request_id": "1"}) == {"request_id": "1"}
    assert add_sample_sequence_ids(b"{}", "text") == "text"


def test_installed_sdk_is_the_pinned_one() -> None:
    """piexp's own environment must carry the SDK the workarounds were made for."""
    from importlib.metadata import version

    assert version("tinker") == TINKER_SDK_VERSION


def test_launcher_is_written_once_complete_and_without_piexp(tmp_path) -> None:
    """The server venv runs the written folder: every file of skyrl_server/ beside the
    entry point, the pinned version filled in everywhere, no import of piexp (which that
    venv lacks); a second write finds it complete, and a damaged one is rewritten."""
    path = write_launcher(tmp_path)
    assert path == write_launcher(tmp_path) and path.name == "launcher.py"
    files = launcher_files()
    assert {"launcher.py", "piexp_skyrl_server/__init__.py", "piexp_skyrl_server/fixes.py",
            "piexp_skyrl_server/speedups.py", "piexp_skyrl_server/launching.py"} <= set(files)  # fmt: skip
    for name, text in files.items():
        written = (path.parent / name).read_text()
        assert written == text, name
        compile(written, name, "exec")
        assert "__SKYRL_VERSION__" not in written, name  # every placeholder filled in
        assert not re.search(r"^\s*(import|from) piexp[.\s]", written, re.MULTILINE), name
    assert f"skyrl {SKYRL_VERSION}'s Tinker API server" in files["launcher.py"]
    (path.parent / "piexp_skyrl_server" / "fixes.py").write_text("damaged")
    assert write_launcher(tmp_path) == path
    assert (path.parent / "piexp_skyrl_server" / "fixes.py").read_text() == files["piexp_skyrl_server/fixes.py"]


def test_the_removed_prefix_cache_is_refused_with_why_and_false_still_accepted() -> None:
    """`service.prefix_cache` was a command-line key: `false` keeps working, `true` is one
    paragraph saying the cache was removed because it measured no gain."""
    from piexp.config.compose import load
    from piexp.errors import UserError

    assert load(["service=local", "service.prefix_cache=false"]).service.prefix_cache is False
    with pytest.raises(UserError) as info:
        load(["service=local", "service.prefix_cache=true"])
    assert "prefix cache was removed because it measured no gain" in " ".join(str(info.value).split())


def test_an_unknown_speedup_flag_is_refused_by_name() -> None:
    """PIEXP_SKYRL_SPEEDUPS: unset or `all` is every speed-up, names pick some, a typo stops the engine naming it."""
    from piexp.service.compat.skyrl_server import speedups

    assert speedups.enabled(None) == speedups.enabled("all") == list(speedups.SPEEDUPS)
    assert speedups.enabled("lora_matmuls, untrained_lora") == ["lora_matmuls", "untrained_lora"]
    with pytest.raises(SystemExit, match="unknown speed-up lora_matmul "):
        speedups.enabled("lora_matmul")


def test_the_sdk_pin_is_checked_in_piexps_own_environment() -> None:
    from piexp.pinned_hooks import pin_problems
    from piexp.service.compat.pins import TINKER_SDK

    assert pin_problems(TINKER_SDK) == []
    assert pin_problems(TINKER_SDK, installed="0.39.0") == ["tinker 0.39.0 is installed, expected 0.38.0"]


def test_placeholder_key_is_restored(monkeypatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-real-user-key")
    import os

    with placeholder_api_key(override=True):
        assert os.environ["TINKER_API_KEY"] == LOCAL_API_KEY
    assert os.environ["TINKER_API_KEY"] == "tml-real-user-key"
    monkeypatch.delenv("TINKER_API_KEY")
    with placeholder_api_key(override=False):
        assert os.environ["TINKER_API_KEY"] == LOCAL_API_KEY
    assert "TINKER_API_KEY" not in os.environ


# --------------------------------------------------------------------------- the proxy


class FakeSkyrl:
    """A stand-in upstream: answers asample without ids and records what it got."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._ready = threading.Event()

    async def _handle(self, request):  # type: ignore[no-untyped-def]
        from aiohttp import web

        body = await request.read()
        self.seen.append((request.method, request.path, body))
        if request.path == "/api/v1/asample":
            return web.json_response({"request_id": "42", "model_id": None})
        if request.path.startswith("/api/v1/training_runs/"):
            return web.json_response({"training_run_id": "model_src", "base_model": "m", "lora_rank": 8})
        if request.path == "/api/v1/create_model":
            return web.json_response({"model_id": "model_new", "base_model": "m", "request_id": "1"})
        if request.path == "/api/v1/load_weights":
            return web.json_response({"request_id": "2", "model_id": json.loads(body)["model_id"]})
        return web.json_response({"echo": json.loads(body) if body else None})

    def _serve(self) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> FakeSkyrl:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture()
def proxied() -> Iterator[tuple[FakeSkyrl, SampleIdProxy]]:
    upstream = FakeSkyrl().start()
    with SampleIdProxy(f"http://127.0.0.1:{upstream.port}") as proxy:
        yield upstream, proxy
    upstream.stop()


def test_proxy_adds_ids_to_asample_and_passes_the_rest(proxied) -> None:
    import httpx

    upstream, proxy = proxied
    reply = httpx.post(proxy.url + "/api/v1/asample", json={"num_samples": 2, "seq_id": 0}).json()
    assert reply["sample_sequence_ids"] == ["42:0-0", "42:0-1"]
    other = httpx.post(proxy.url + "/api/v1/optim_step", json={"model_id": "x"}).json()
    assert other == {"echo": {"model_id": "x"}}
    assert proxy.rewritten == 1
    assert [path for _, path, _ in upstream.seen] == ["/api/v1/asample", "/api/v1/optim_step"]


def test_proxy_turns_create_via_load_into_create_then_load(proxied) -> None:
    import httpx

    upstream, proxy = proxied
    request = {"session_id": "s1", "model_seq_id": 3, "path": "tinker://model_src/weights/ck", "optimizer": True}
    reply = httpx.post(proxy.url + "/api/v1/load_weights", json=request).json()
    assert reply["model_id"] == "s1:train:3"  # the id the SDK derives
    paths = [path for _, path, _ in upstream.seen]
    assert paths == ["/api/v1/training_runs/model_src", "/api/v1/create_model", "/api/v1/load_weights"]
    created = json.loads(upstream.seen[1][2])
    assert created["lora_config"] == {"rank": 8} and created["session_id"] == "s1"
    # Later requests under the SDK's id reach skyrl's id, and replies map back.
    echo = httpx.post(proxy.url + "/api/v1/optim_step", json={"model_id": "s1:train:3"}).json()
    assert echo == {"echo": {"model_id": "model_new"}}


# ------------------------------------------------------------------- proxy.py item 3: seeds


def _sample_request(prompt: list[int], seed: int | None = None) -> bytes:
    params = {"max_tokens": 8, "temperature": 0.5, **({"seed": seed} if seed is not None else {})}
    return json.dumps(
        {"num_samples": 1, "prompt": {"chunks": [{"tokens": prompt}]}, "sampling_params": params, "seq_id": 7}
    ).encode()


def _seed_of(body: bytes) -> int | None:
    return json.loads(body)["sampling_params"].get("seed")


def test_request_seeds_are_distinct_for_alike_requests_and_the_same_run_after_run() -> None:
    from piexp.service.compat.proxy import RequestSeeds

    def run(seed: int) -> list[int | None]:
        seeds = RequestSeeds(seed)
        # A group's episodes send the same first prompt; a later turn another one.
        bodies = [_sample_request([1, 2, 3]) for _ in range(4)] + [_sample_request([1, 2, 3, 4])]
        return [_seed_of(seeds.sample(body)) for body in bodies]

    first = run(0)
    assert all(isinstance(s, int) and 0 <= s < 2**31 for s in first)
    assert len(set(first)) == 5  # alike requests still draw differently
    assert run(0) == first  # the same requests in the same order: the same seeds
    assert run(1) != first  # another run seed: other draws
    seeds = RequestSeeds(0)
    # A seed the client chose, and bodies that are not a sampling request, pass unchanged.
    assert _seed_of(seeds.sample(_sample_request([5], seed=123))) == 123
    assert seeds.sample(b"not json") == b"not json"
    assert seeds.sample(b'{"num_samples": 1}') == b'{"num_samples": 1}'


def test_request_seeds_give_a_lora_without_a_seed_the_runs() -> None:
    from piexp.service.compat.proxy import RequestSeeds

    seeds = RequestSeeds(5)
    created = json.loads(seeds.create_model(json.dumps({"base_model": "m", "lora_config": {"rank": 8}}).encode()))
    assert created["lora_config"] == {"rank": 8, "seed": 5}
    chosen = json.dumps({"base_model": "m", "lora_config": {"rank": 8, "seed": 9}}).encode()
    assert seeds.create_model(chosen) == chosen


def test_a_seeded_proxy_seeds_what_reaches_the_server() -> None:
    import httpx

    upstream = FakeSkyrl().start()
    try:
        with SampleIdProxy(f"http://127.0.0.1:{upstream.port}", seed=3) as proxy:
            for _ in range(2):
                httpx.post(proxy.url + "/api/v1/asample", content=_sample_request([1, 2]))
            httpx.post(proxy.url + "/api/v1/create_model", json={"session_id": "s", "base_model": "m",
                                                                 "lora_config": {"rank": 8}})  # fmt: skip
    finally:
        upstream.stop()
    sampled = [_seed_of(body) for _, path, body in upstream.seen if path == "/api/v1/asample"]
    assert len(sampled) == 2 and None not in sampled and sampled[0] != sampled[1]
    created = next(json.loads(body) for _, path, body in upstream.seen if path == "/api/v1/create_model")
    assert created["lora_config"]["seed"] == 3
