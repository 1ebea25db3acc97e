"""piexp's code sandbox: a SandboxFusion-compatible `/run_code` server with namespace
isolation (runs started by the zygote, zygote.c, or by a bwrap each), the embedded
launcher that runs the server on loopback, and the pooled client.

Public API:
- `sandbox_client(url) -> SandboxClient`, `await client.run(...)`, `close_sandbox_clients()`
- `ensure_loopback_url(url)`
- `EmbeddedSandbox(settings=None, **settings_overrides)` (context manager, `.url`)
- `SandboxSettings`, `PROTOCOL_LANGUAGES` (SandboxFusion's language ids; piexp's own
  language names and their protocol ids are in `piexp.languages`)
- `create_app(settings)` for hosting the server in-process
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import SandboxClient, close_sandbox_clients, sandbox_client
    from .embedded import EmbeddedSandbox
    from .protocol import PROTOCOL_LANGUAGES
    from .settings import SandboxSettings
    from .url import ensure_loopback_url

# Where each public name lives, imported on first use: the server process
# (`python -m piexp.sandbox serve`) never loads the client's HTTP stack.
_HOMES = {
    "SandboxClient": ".client",
    "close_sandbox_clients": ".client",
    "sandbox_client": ".client",
    "EmbeddedSandbox": ".embedded",
    "PROTOCOL_LANGUAGES": ".protocol",
    "SandboxSettings": ".settings",
    "ensure_loopback_url": ".url",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "EmbeddedSandbox",
    "PROTOCOL_LANGUAGES",
    "SandboxClient",
    "SandboxSettings",
    "close_sandbox_clients",
    "ensure_loopback_url",
    "sandbox_client",
]


def create_app(*args, **kwargs):
    """Lazy import: aiohttp is only needed by whoever hosts the server."""
    from .server import create_app as _create_app

    return _create_app(*args, **kwargs)
