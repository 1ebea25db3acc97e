"""Secret redaction for everything written into run folders (configs, manifests):
run folders get shared and committed, so an API key or another secret from the
environment must never end up in them."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "redact_secrets"]

REDACTED = "<redacted>"

# The Tinker SDK's key: redacted whatever its length.
_API_KEY_ENV = "TINKER_API_KEY"

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


# The shell's working directories: `pwd` there is "print working directory", and a path
# scrubbed from run records (a family's file, a config folder) would make them unusable.
_NOT_SECRET_ENV = frozenset({"PWD", "OLDPWD"})


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
        if (k == _API_KEY_ENV or (_looks_secret_key(k) and k not in _NOT_SECRET_ENV))
        and len(v.strip()) >= _MIN_SECRET_LEN
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
