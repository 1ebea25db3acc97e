"""RECORDED-CONTRACT TEST, not a live one: the `model` policy needs a Tinker account, so
offline we only pin which service-client calls it makes and how the resulting cookbook
`TinkerTokenCompleter` calls the sampler (recorded with fakes shaped like tinker 0.x's
ServiceClient / SamplingClient)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import tinker
from tinker_cookbook.completers import TinkerTokenCompleter

from piexp.config.compose import load
from piexp.policies import build_model_policy


class FakeSampling:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    async def sample_async(self, prompt, num_samples, sampling_params):
        self.calls.append({"prompt": prompt, "num_samples": num_samples, "params": sampling_params})
        sequence = SimpleNamespace(tokens=[1, 2, 3], logprobs=[-0.1, -0.2, -0.3], stop_reason="stop")
        return SimpleNamespace(sequences=[sequence])


class FakeService:
    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.sampling = FakeSampling()

    def create_sampling_client(self, model_path=None, base_model=None):
        self.calls.append({"model_path": model_path, "base_model": base_model})

        async def future():  # tinker returns an awaitable future of the client
            return self.sampling

        return future()


def test_base_model_contract():
    config = load(["mode=eval", "policy=model", "limits.max_generation_tokens=321"])
    service = FakeService()
    policy = asyncio.run(build_model_policy(config, service_client=service))
    assert service.calls == [{"model_path": None, "base_model": config.model.name}]
    assert isinstance(policy, TinkerTokenCompleter)
    assert policy.max_tokens == 321 and policy.temperature == config.model.temperature
    result = asyncio.run(policy(tinker.ModelInput.from_ints([5, 6]), stop=[7], max_tokens=100))
    (call,) = service.sampling.calls
    assert call["num_samples"] == 1
    assert call["params"].max_tokens == 100 and call["params"].stop == [7]
    assert result.tokens == [1, 2, 3] and result.stop_reason == "stop"


def test_checkpoint_contract():
    path = "tinker://run-123/sampler_weights/000010"
    config = load(["mode=eval", "policy=model", f"checkpoint={path}"])
    service = FakeService()
    asyncio.run(build_model_policy(config, service_client=service))
    assert service.calls == [{"model_path": path, "base_model": None}]


class FailingSampling(FakeSampling):
    """The sampler of a service that went away: every call fails as the SDK fails once its
    retries are spent."""

    async def sample_async(self, prompt, num_samples, sampling_params):
        self.calls.append({"prompt": prompt})
        raise tinker.RequestFailedError("sampler is gone", request_id="r-1", category="server")  # type: ignore[arg-type]


def test_a_failing_sampler_stops_a_model_eval_instead_of_recording_failed_episodes(sandbox_url, tmp_path, monkeypatch):
    import pytest

    import piexp.launch.evaluate as evaluate
    from piexp.env.splits import build_splits

    config = load(["mode=eval", "policy=model", "family=arith", "lang=python", "tasks.eval_per_family=6",
                   "tasks.train_per_family=1", "mode.max_concurrency=1"])  # fmt: skip
    service = FakeService()
    service.sampling = FailingSampling()

    async def policy(config, tasks):
        return await build_model_policy(config, service_client=service)

    monkeypatch.setattr(evaluate, "_build_policy", policy)
    with pytest.raises(evaluate.EvalIncompleteError, match="sampling from service=tinker.*RequestFailedError") as stop:
        evaluate.run_eval(config, tmp_path, sandbox_url, build_splits(config))
    assert stop.value.exit_code == 4 and "not marked complete" in str(stop.value)
    assert len(service.sampling.calls) <= 2, "the eval stopped at the first failed call (one more may have started)"
    assert not (tmp_path / "episodes.jsonl").read_text().strip(), "no episode was recorded"
    results = evaluate.json.loads((tmp_path / "results.json").read_text())
    assert results["complete"] is False and results["episodes_failed_to_run"] == 6
