"""Checks that the Tinker training service (or a self-hosted one) can be used, before a
run spends time on anything else: a training or model-evaluation run first builds
splits, starts a sandbox and loads a tokenizer, and finding out only then (or after
the SDK's own retries, which can take minutes) that the API key is missing or the
service is not reachable wastes time and hides the cause. ``preflight_tinker`` fails
fast, within a hard bound, with one paragraph that says what to do; the API key is
never logged, printed or put into an error message here."""

from __future__ import annotations

import os
import threading

from piexp.errors import ServiceUnavailableError

__all__ = [
    "DEFAULT_TINKER_BASE_URL",
    "HEALTH_PATH",
    "preflight_tinker",
    "require_api_key",
    "resolve_base_url",
]

#: Same default as ``tinker.lib.base_url.DEFAULT_BASE_URL`` (tinker 0.38).  Copied,
#: not imported, because importing tinker takes ~2 s and the preflight should be
#: instant; ``tests/test_service_and_manifest.py`` checks the two agree.
DEFAULT_TINKER_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"

#: The SDK's cheap readiness endpoint (``AsyncServiceResource.health_check``).
HEALTH_PATH = "/api/v1/healthz"

_API_KEY_ENV = "TINKER_API_KEY"

_OFFLINE_HINT = (
    "Without an account, start with `python -m piexp experiment=offline` (piexp's offline "
    "default, `make experiment`: the check, then an eval of the oracle with its tables and "
    "viewer). Other runs that need no model service: `python -m piexp mode=eval policy=oracle` "
    "(score the reference solutions; policy=wrong, crash, guess or edit for the other scripted "
    "policies) and `python -m piexp mode=check` (validate tasks and sandbox). To train without an "
    "account: `python -m piexp service=local model=tiny-local family=arith mode.max_steps=2` (a "
    "Tinker-compatible server and a tiny model on this machine's CPU)."
)


def require_api_key() -> None:
    """Raise :class:`ServiceUnavailableError` unless ``TINKER_API_KEY`` is set.

    Only the key's presence is checked (no network), so the CLI can call it before
    composing jobs.  Returns nothing on purpose: the key is read by the tinker SDK
    itself and should not travel through piexp's code.
    """
    if not os.environ.get(_API_KEY_ENV, "").strip():
        raise ServiceUnavailableError(
            f"The Tinker API key is not set. Training and model evaluation use the Tinker "
            f"service, which needs the environment variable {_API_KEY_ENV}: create a key in "
            f"the Tinker console and run `export {_API_KEY_ENV}=...` in the shell that "
            f"starts piexp (or put it in your shell profile or secret manager; never in a "
            f"config file, which gets copied into run folders). {_OFFLINE_HINT}"
        )


def resolve_base_url(base_url: str | None) -> str:
    """The service URL as the SDK resolves it: argument, ``$TINKER_BASE_URL``, default."""
    resolved = (base_url or "").strip() or os.environ.get("TINKER_BASE_URL", "").strip()
    return (resolved or DEFAULT_TINKER_BASE_URL).rstrip("/")


def _probe(url: str, timeout_s: float) -> BaseException | int:
    """GET ``url`` once; return the HTTP status, or the exception that prevented it."""
    import httpx

    try:
        # No auth header: reachability is all we test, and a 401 counts as an answer.
        # No redirects: any answer at all proves the service is there.
        with httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=False) as client:
            return client.get(url, headers={"Accept": "application/json"}).status_code
    except BaseException as e:  # noqa: BLE001 - reported to the caller, not swallowed
        return e


def preflight_tinker(base_url: str | None, timeout_s: float = 10.0, *, url_key: str = "service.base_url") -> None:
    """Fail fast, within about ``timeout_s`` seconds, if Tinker cannot be used.

    1. ``TINKER_API_KEY`` must be set (see :func:`require_api_key`).
    2. The service must answer an HTTP GET on its health endpoint.  Any HTTP answer,
       even 401/404/5xx, counts as reachable: this checks the network path (DNS,
       proxy, firewall, TLS), not the account; the SDK reports auth errors itself.

    The probe runs in a daemon thread joined with the bound because httpx's time-outs
    apply per phase and DNS resolution is not covered by them; the join makes the
    bound hard.  Raises :class:`ServiceUnavailableError` (exit code 3) otherwise.
    """
    require_api_key()
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    url = resolve_base_url(base_url) + HEALTH_PATH
    result: list[BaseException | int] = []
    worker = threading.Thread(
        target=lambda: result.append(_probe(url, timeout_s)), name="piexp-tinker-preflight", daemon=True
    )
    worker.start()
    worker.join(timeout_s)
    if not result:
        reason: str = f"no answer within {timeout_s:g} s"
    elif isinstance(result[0], int):
        return
    else:
        err = result[0]
        reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    raise ServiceUnavailableError(
        f"The {'Tinker' if url_key == 'service.base_url' else 'self-hosted'} service at {url} could not be reached within the {timeout_s:g} s bound "
        f"({reason}). Check the network connection, any proxy settings (HTTPS_PROXY), and "
        f"the service URL ({_url_setting(url_key)}); raise "
        f"`service.connect_timeout_s` if the link is just slow. {_OFFLINE_HINT}"
    )


def _url_setting(url_key: str) -> str:
    """Where the probed URL came from: a self-hosted server's is `service.url` only."""
    if url_key == "service.base_url":
        return "config `service.base_url` or $TINKER_BASE_URL"
    return f"config `{url_key}`"
