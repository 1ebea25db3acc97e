"""Checks that the Tinker training service can be used, and secret redaction.

Why a preflight: a training or model-evaluation run first builds splits, starts a
sandbox and loads a tokenizer; finding out only then (or after the SDK's own
retries, which can take minutes) that the API key is missing or the service is not
reachable wastes time and hides the cause.  ``preflight_tinker`` fails fast, within
a hard bound, with one paragraph that says what to do.

Why redaction lives here: configs and manifests are written into run folders that
get shared and committed; the API key must never end up in them.  The key is never
logged, printed or put into an error message by this module.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from piexp.errors import ServiceUnavailableError

__all__ = [
    "DEFAULT_TINKER_BASE_URL",
    "HEALTH_PATH",
    "REDACTED",
    "preflight_tinker",
    "redact_secrets",
    "require_api_key",
    "resolve_base_url",
]

#: Same default as ``tinker.lib.base_url.DEFAULT_BASE_URL`` (tinker 0.38).  Copied,
#: not imported, because importing tinker takes ~2 s and the preflight should be
#: instant; ``tests/test_service_and_manifest.py`` checks the two agree.
DEFAULT_TINKER_BASE_URL = "https://tinker.thinkingmachines.dev/services/tinker-prod"

#: The SDK's cheap readiness endpoint (``AsyncServiceResource.health_check``).
HEALTH_PATH = "/api/v1/healthz"

REDACTED = "<redacted>"

_API_KEY_ENV = "TINKER_API_KEY"

_OFFLINE_HINT = (
    "Runs that need no model service still work without it: "
    "`piexp mode=eval policy=oracle` (score the reference solutions) and `piexp mode=check` "
    "(validate tasks and sandbox)."
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


# --------------------------------------------------------------------------- redaction

# Key names are split into words ("api_key", "apiKey", "X-Api-Key" -> api, key) and
# judged by word, so "max_tokens", "tokenizer" or "sort_keys" are not mistaken for
# secrets while "access_token", "TINKER_API_KEY" and "db_password" are.
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "secrets", "password", "passwd", "pwd", "credential", "credentials"}
)
# Token-named fields of tokenizer/sampling configs that are not secrets.
_NOT_SECRET_KEYS = frozenset(
    {
        "eos_token", "bos_token", "pad_token", "unk_token", "sep_token", "cls_token",
        "mask_token", "stop_token", "end_token", "start_token", "special_token",
    }
)  # fmt: skip
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_MIN_SECRET_LEN = 8  # shorter env values would redact innocent substrings


def _looks_secret_key(name: str) -> bool:
    if name.lower() in _NOT_SECRET_KEYS:
        return False
    words = [w.lower() for w in _WORD_SPLIT.split(name) if w]
    return any(w in _SECRET_WORDS for w in words)


def _secret_values() -> tuple[frozenset[str], list[str]]:
    """Secrets to scrub: (exact values, substrings longest first).

    ``TINKER_API_KEY`` is matched exactly whatever its length; it and the values of
    other secret-looking environment variables (``WANDB_API_KEY``, ``HF_TOKEN``...)
    are also replaced inside longer strings when long enough to be unambiguous.
    Longest first so a secret that contains another is replaced whole.
    """
    exact = {os.environ.get(_API_KEY_ENV, "").strip()} - {""}
    values = {
        v.strip()
        for k, v in os.environ.items()
        if (k == _API_KEY_ENV or _looks_secret_key(k)) and len(v.strip()) >= _MIN_SECRET_LEN
    }
    return frozenset(exact | values), sorted(values, key=len, reverse=True)


def _scrub(text: str, secrets: tuple[frozenset[str], list[str]]) -> str:
    exact, substrings = secrets
    if text in exact:
        return REDACTED
    for s in substrings:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


def _redact(obj: Any, secrets: tuple[frozenset[str], list[str]]) -> Any:
    if isinstance(obj, str):
        return _scrub(obj, secrets)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            key = _scrub(k, secrets) if isinstance(k, str) else k
            if isinstance(k, str) and _looks_secret_key(k) and v is not None and not isinstance(v, bool):
                out[key] = REDACTED  # keep None/bools: "not set" / "enabled" is useful, not secret
            else:
                out[key] = _redact(v, secrets)
        return out
    if isinstance(obj, (list, tuple)):
        return [_redact(v, secrets) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((_redact(v, secrets) for v in obj), key=repr)
    return obj


def redact_secrets(obj: Any) -> Any:
    """A copy of ``obj`` safe to write into run folders.

    * values under secret-looking keys (key/token/secret/password..., by word, any
      case, at any depth) become ``"<redacted>"`` (``None`` and booleans are kept);
    * any string containing the current ``TINKER_API_KEY`` (or the value of another
      secret-looking environment variable, e.g. ``WANDB_API_KEY``) has it replaced.

    Mappings become dicts, tuples/sets become lists (JSON-able); other objects are
    returned as they are, so convert config objects (e.g. OmegaConf) to containers
    first.
    """
    return _redact(obj, _secret_values())
