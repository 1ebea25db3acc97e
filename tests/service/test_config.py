"""The service and warm-start options validate before anything runs, and a local or
self-hosted run never asks the user for a Tinker key."""

from __future__ import annotations

import pytest

from piexp.config.compose import validate_command_line
from piexp.errors import UserError


def _one(overrides: list[str]):  # type: ignore[no-untyped-def]
    (config,) = validate_command_line(overrides, multirun=False)
    return config


def test_local_and_tiny_model_compose() -> None:
    config = _one(["service=local", "model=tiny-local", "warm_start.sft_steps=3"])
    assert config.service.name == "local" and not hasattr(config.service, "url")  # a selfhosted key
    assert config.model.name == "tiny-local" and config.model.renderer == "qwen3"
    assert config.warm_start.sft_steps == 3 and config.warm_start.policy == "oracle"


def test_selfhosted_needs_a_url() -> None:
    with pytest.raises(UserError, match="service.url"):
        _one(["service=selfhosted"])
    with pytest.raises(UserError, match="http"):
        _one(["service=selfhosted", "service.url=gpu-box:8000"])
    config = _one(["service=selfhosted", "service.url=http://gpu-box:8000"])
    assert config.service.url == "http://gpu-box:8000" and config.service.compat_proxy


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["model=tiny-local"], "service=local"),
        (["service=local", "+service.url=http://x:1"], "only used with service=selfhosted"),
        (["mode=eval", "policy=oracle", "warm_start.sft_steps=2"], "training option"),
        (["warm_start.sft_steps=-1"], "warm_start.sft_steps"),
        (["warm_start.policy=null_policy"], "warm_start.policy"),
        (["service=nosuch"], "nosuch"),
    ],
)
def test_refused(overrides: list[str], needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        _one(overrides)


def test_local_run_needs_no_user_key(monkeypatch) -> None:
    from piexp.commands.run import prevalidate

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    prevalidate(["service=local", "model=tiny-local"], False, False, False)
    # A self-hosted server is probed before any folder is made: nothing listens on port 9,
    # and the advice names its real key (service.url), not Tinker's.
    with pytest.raises(UserError) as refused:
        prevalidate(
            ["service=selfhosted", "service.url=http://127.0.0.1:9", "service.connect_timeout_s=3"], False, False, False
        )
    assert "config `service.url`" in str(refused.value) and "TINKER_BASE_URL" not in str(refused.value)
    with pytest.raises(UserError, match="TINKER_API_KEY"):
        prevalidate([], False, False, False)
