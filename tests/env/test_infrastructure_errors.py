"""What a training group does with an episode whose program the sandbox could not run
(`algo.infrastructure_errors`), through the real workspace env, oracle policy, sandbox
and tinker-cookbook's own rollout strategies: `retry` re-rolls it (no -0.1 reaches the
group), `mask` leaves it out (and drops a group left with fewer than two), `penalize`
scores it -0.1 as the reference environment does. The failures come from a labelled test
fixture: a pass-through proxy in front of the real sandbox that answers HTTP 500 to
chosen `/run_code` requests (a sandbox-side error, not the program's)."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest
from tinker_cookbook.exceptions import AllTrajectoriesFailedError
from tinker_cookbook.rl.rollouts import do_group_rollout

from piexp.config.compose import load
from piexp.env.dataset import episode_settings
from piexp.env.episode import WorkspaceGroupBuilder, get_run_renderer
from piexp.env.rollout_policy import rollout_error_tolerance
from piexp.env.splits import build_splits
from piexp.policies import make_policy
from piexp.sandbox.client import close_sandbox_clients
from piexp.sandbox.embedded import bound_listening_socket

GROUP = 4


class FlakyProxy:
    """Test fixture: forwards to a real sandbox, but answers HTTP 500 to the `/run_code`
    requests whose 1-based number is in `failing`."""

    def __init__(self, backend: str, failing: set[int]) -> None:
        self.backend = backend.rsplit("/run_code", 1)[0]
        self.failing = failing
        self.count = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                answer = httpx.get(proxy.backend + self.path, trust_env=False)
                self._answer(answer.status_code, answer.content)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with proxy.lock:
                    proxy.count += 1
                    fail = proxy.count in proxy.failing
                if fail:
                    self._answer(500, b"internal error of the test fixture", "text/plain")
                    return
                answer = httpx.post(proxy.backend + self.path, content=body, timeout=120, trust_env=False,
                                    headers={"Content-Type": "application/json"})  # fmt: skip
                self._answer(answer.status_code, answer.content)

        sock = bound_listening_socket()
        self.server = http.server.ThreadingHTTPServer(sock.getsockname(), Handler, bind_and_activate=False)
        self.server.socket = sock
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/run_code"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky(sandbox_url: str) -> Iterator[callable]:
    proxies: list[FlakyProxy] = []

    def make(failing: set[int]) -> FlakyProxy:
        proxies.append(FlakyProxy(sandbox_url, failing))
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()


def _group(url: str, mode: str):
    config = load(["mode=train", f"mode.group_size={GROUP}", "family=arith", "lang=python",
                   f"algo.infrastructure_errors={mode}", "tasks.train_per_family=1", "tasks.eval_per_family=1"])  # fmt: skip
    splits = build_splits(config)
    settings = episode_settings(config, url)
    renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
    builder = WorkspaceGroupBuilder(task=splits.train[0], language="python", settings=settings, group_size=GROUP)
    policy = make_policy("oracle", renderer, [*splits.train, *splits.eval])
    strategy = rollout_error_tolerance(config.algo, config.sandbox.episode_retries, GROUP)

    async def rollout():
        try:
            return await do_group_rollout(builder, policy, strategy=strategy)
        finally:
            await close_sandbox_clients()

    return asyncio.run(rollout())


def _infrastructure_error(trajectory) -> float:
    return trajectory.transitions[-1].metrics["infrastructure_error"]


def test_retry_rerolls_the_failed_episodes_and_no_penalty_reaches_the_group(flaky):
    proxy = flaky({1, 3})
    group = _group(proxy.url, "retry")
    assert group.get_total_rewards() == [1.0] * GROUP
    assert [_infrastructure_error(t) for t in group.trajectories_G] == [0.0] * GROUP
    assert [error.error_type for error in group.rollout_errors] == ["InfrastructureFailure"] * 2
    assert proxy.count == GROUP + 2, "each failed episode was played once more"


def test_mask_leaves_the_failed_episodes_out_of_their_group(flaky):
    group = _group(flaky({1, 3}).url, "mask")
    assert group.get_total_rewards() == [1.0, 1.0], "two episodes ran; the two the sandbox failed are not in it"
    assert len(group.rollout_errors) == 2


def test_mask_drops_a_group_left_with_one_episode(flaky):
    with pytest.raises(AllTrajectoriesFailedError):  # the cookbook's loop skips the group on this error
        _group(flaky({1, 2, 3}).url, "mask")


def test_penalize_scores_the_failed_episodes_as_the_reference_does(flaky):
    group = _group(flaky({1, 3}).url, "penalize")
    assert sorted(group.get_total_rewards()) == [-0.1, -0.1, 1.0, 1.0]
    assert sorted(_infrastructure_error(t) for t in group.trajectories_G) == [0.0, 0.0, 1.0, 1.0]
    assert not group.rollout_errors


def test_fail_fast_cannot_carry_retry_or_mask():
    from piexp.errors import UserError

    with pytest.raises(UserError, match="fail_fast would stop the run"):
        load(["mode=train", "algo.rollout_error_tolerance.strategy=fail_fast"])
    load(["mode=train", "algo.rollout_error_tolerance.strategy=fail_fast", "algo.infrastructure_errors=penalize"])
