"""The `model` policy: a Tinker sampler (base model, a `tinker://` checkpoint, or a
training run folder's final one) as the cookbook's `TinkerTokenCompleter`, so model
evaluation uses the same rollout code as the scripted policies. Needs a Tinker account; offline tests cover it only by a recorded
contract (which client calls are made, with which arguments)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import tinker
from tinker_cookbook.completers import TinkerTokenCompleter, TokensWithLogprobs

from piexp.config.schema import RunConfig


class ModelServiceFailure(BaseException):
    """A sampling call failed after the tinker SDK's own retries: the model service, not
    the episode, failed, so the run stops (resumable) instead of recording a stream of
    failed episodes. A BaseException so that no rollout code takes it for one episode's
    error (they catch `Exception`)."""


@dataclass
class ServiceTokenCompleter(TinkerTokenCompleter):
    """`TinkerTokenCompleter` whose failed sampling calls raise `ModelServiceFailure`,
    naming the service."""

    service: str = "the model service"

    async def __call__(self, model_input: Any, stop: Any, *, max_tokens: int | None = None) -> TokensWithLogprobs:
        try:
            return await super().__call__(model_input, stop, max_tokens=max_tokens)
        except tinker.TinkerError as error:
            raise ModelServiceFailure(f"{self.service}: {type(error).__name__}: {error}") from error


async def build_model_policy(config: RunConfig, service_client: Any | None = None) -> TinkerTokenCompleter:
    """Sampling client for `config.checkpoint` if set, else for the base `config.model.name`.

    `max_tokens` is the per-turn generation limit of the episodes, and the temperature is
    the model's, so an evaluation samples the way training does.
    """
    if service_client is None:
        import tinker

        service_client = tinker.ServiceClient(base_url=config.service.base_url)
    if config.checkpoint:
        from piexp.checkpoint_source import resolve_checkpoint

        source = resolve_checkpoint(config.checkpoint)
        if source.run_dir is not None and source.state_path and config.service.name == "local":
            # A fresh SkyRL server samples only from models it holds: load the run's final
            # weights into a new one (same server state) and sample from those.
            pending_training = service_client.create_training_client_from_state(source.state_path)
            training = await pending_training if inspect.isawaitable(pending_training) else pending_training
            pending = training.save_weights_and_get_sampling_client()
        else:
            pending = service_client.create_sampling_client(model_path=source.sampler_path)
    else:
        pending = service_client.create_sampling_client(base_model=config.model.name)
    # tinker returns a future of the client (awaitable); older clients return it directly.
    sampling_client = await pending if inspect.isawaitable(pending) else pending
    return ServiceTokenCompleter(
        sampling_client,
        max_tokens=config.limits.max_generation_tokens,
        temperature=config.model.temperature,
        service=f"sampling from service={config.service.name} ({config.service.base_url or 'Tinker'})",
    )
