"""The run config's `service` (where training and sampling run: tinker, local or
selfhosted) and `sandbox` (where programs run: embedded or remote): each a tagged union
of one settings class per variant, holding only the keys that variant uses (parts of
`piexp.config.schema.RunConfig`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from piexp.config.base import VariantSettings

__all__ = [
    "EmbeddedSandboxSettings", "LocalService", "RemoteSandboxSettings", "SandboxBase", "SandboxSettings",
    "SelfhostedService", "ServiceBase", "ServiceSettings", "TinkerService",
]  # fmt: skip

# The values every YAML of the old flat blocks gave the keys that are now some variants'
# only: a run folder's saved config holding one of them on another variant still reads.
_SERVICE_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "url": (None,),
    "connect_timeout_s": (15,),
    "start_timeout_s": (300,),
    "tcmalloc": (True,),
    "prefix_cache": (False,),
    "compat_proxy": (True,),
}
# max_restarts: remote.yaml's 0, or embedded.yaml's 3 under sandbox.kind=remote.
_SANDBOX_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "output_cap_bytes": (1048576,),
    "allow_unisolated": (False,),
    "launcher": ("zygote",),
    "max_restarts": (0, 3),
    "restart_window_s": (600,),
    "health_timeout_s": (30,),
}


class ServiceBase(VariantSettings):
    GROUP = "service"
    TAG = "name"
    FORMER_DEFAULTS = _SERVICE_DEFAULTS

    # Each variant narrows it to its own name (declared here so that it comes first).
    name: str = Field(description="where training and model sampling run")
    # Every service's client is built on it (policies, the training loop).
    base_url: str | None = Field(description="the endpoint piexp's Tinker clients use")


class TinkerService(ServiceBase):
    """The Tinker API (needs TINKER_API_KEY)."""

    name: Literal["tinker"] = Field(description="where training and model sampling run: the Tinker API")
    base_url: str | None = Field(description="endpoint override (null = $TINKER_BASE_URL, else the SDK's default)")
    connect_timeout_s: PositiveFloat = Field(description="seconds the service has to answer")


class LocalService(ServiceBase):
    """A SkyRL server piexp starts on loopback and stops at exit (offline)."""

    name: Literal["local"] = Field(description="where training and model sampling run: a server piexp starts")
    base_url: str | None = Field(description="set at run time (the server's compatibility proxy)")
    start_timeout_s: PositiveFloat = Field(description="bound on the server's start-up")
    tcmalloc: bool = Field(description="the server allocates with tcmalloc where installed")
    prefix_cache: bool = Field(description="removed (only false is accepted): the local server's prefix cache")

    @field_validator("prefix_cache")
    @classmethod
    def _prefix_cache_removed(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "service.prefix_cache=true is no longer available: the local server's prefix cache was "
                "removed because it measured no gain (about 1.0x the wall time of an "
                "experiment=learn_offline run, about 0.9x of an eval alone, and sampled tokens that "
                "differed from a full prefill's in their last bits). Drop the override or set "
                "service.prefix_cache=false; the server now always prefills every prompt in full."
            )
        return value


class SelfhostedService(ServiceBase):
    """A Tinker-compatible server the user runs, at `url`."""

    name: Literal["selfhosted"] = Field(description="where training and model sampling run: a server you run")
    base_url: str | None = Field(description="set at run time (the compatibility proxy's URL, or service.url)")
    url: str = Field(description="the server's URL (http:// or https://)")
    connect_timeout_s: PositiveFloat = Field(description="seconds the service has to answer")
    compat_proxy: bool = Field(description="put piexp's SkyRL compatibility proxy in front")

    @field_validator("url")
    @classmethod
    def _an_http_url(cls, url: str) -> str:
        if not url:
            raise ValueError("service=selfhosted needs service.url (e.g. service.url=http://gpu-box:8000)")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"service.url must be an http:// or https:// URL, got {url!r}")
        return url


ServiceSettings = Annotated[TinkerService | LocalService | SelfhostedService, Field(discriminator="name")]


class SandboxBase(VariantSettings):
    """Where programs run, and the settings piexp gives an embedded server (the server's
    own settings, piexp.sandbox.settings, keep a default for each; see launch/sandbox.py)."""

    GROUP = "sandbox"
    TAG = "kind"
    FORMER_DEFAULTS = _SANDBOX_DEFAULTS

    # Each variant narrows them (declared here so that they come first).
    kind: str = Field(description="where programs run")
    url: str | None = Field(description="the server's /run_code URL")
    max_concurrency: PositiveInt | None = Field(description="concurrent runs (null = cores x 2)")
    memory_limit_mb: PositiveInt = Field(description="per-run memory limit")
    start_timeout_s: PositiveFloat = Field(description="the server must answer /v1/ping within this many seconds")
    unavailable_after_s: PositiveFloat = Field(
        description="a sandbox that answers nothing for this long is given up and the run stops (resumable)"
    )
    episode_retries: Annotated[int, Field(ge=0)] = Field(
        description="an episode whose program could not run for the sandbox's reasons is played again "
        "up to this many times (in training: per group); it is never scored"
    )


class EmbeddedSandboxSettings(SandboxBase):
    """piexp's own isolated server on loopback, supervised (restarted when it dies or hangs)."""

    kind: Literal["embedded"] = Field(description="where programs run: piexp's own server")
    url: str | None = Field(description="set at start-up")
    output_cap_bytes: PositiveInt = Field(description="stdout and stderr are each capped at this")
    allow_unisolated: bool = Field(description="run without bubblewrap (unsafe)")
    launcher: Literal["zygote", "bwrap"] = Field(description="how an isolated run starts")
    max_restarts: Annotated[int, Field(ge=0)] = Field(
        description="restarts of a server that died or hung allowed within restart_window_s"
    )
    restart_window_s: PositiveFloat = Field(description="the window max_restarts is counted in")
    health_timeout_s: PositiveFloat = Field(
        description="a live server that answers no health check for this long is restarted"
    )

    def as_remote(self, url: str) -> RemoteSandboxSettings:
        """This server, once started at `url`, as a remote sandbox of the same settings
        (several runs share it)."""
        shared = {key: getattr(self, key) for key in SandboxBase.model_fields}
        return RemoteSandboxSettings.model_validate({**shared, "kind": "remote", "url": url})


class RemoteSandboxSettings(SandboxBase):
    """An existing SandboxFusion-compatible server on loopback (piexp does not own it)."""

    kind: Literal["remote"] = Field(description="where programs run: an existing loopback server")
    url: str = Field(description="the server's loopback /run_code URL")

    @field_validator("url")
    @classmethod
    def _loopback(cls, url: str) -> str:
        if not url:
            raise ValueError("sandbox=remote needs sandbox.url (a loopback /run_code URL)")
        from piexp.sandbox.url import ensure_loopback_url

        ensure_loopback_url(url)
        return url


SandboxSettings = Annotated[EmbeddedSandboxSettings | RemoteSandboxSettings, Field(discriminator="kind")]
