"""The loopback guard for sandbox URLs.

Model-written code is shipped to whatever answers at the sandbox URL, together with
task files; a remote host would be an exfiltration channel and an unaudited executor.
piexp therefore only talks to sandboxes on this machine.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from piexp.errors import UserError

_ACCEPTED = "only http(s) URLs whose host is a loopback IP (127.0.0.0/8 or ::1) or exactly 'localhost' are accepted"


def ensure_loopback_url(url: str) -> str:
    """Return `url` unchanged if it points at a loopback host, else raise `UserError`.

    The host is taken from a full URL parse (not a prefix match), so look-alikes such as
    `127.0.0.1.example.com` and userinfo tricks such as `http://127.0.0.1@evil.com` are
    judged by the host they really name.
    """

    def refuse(why: str) -> UserError:
        return UserError(f"Sandbox URL {url!r} is refused ({why}): {_ACCEPTED}.")

    if not isinstance(url, str) or not url.strip():
        raise refuse("it is empty")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise refuse("it contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        # Accessing .port validates it (raises ValueError on garbage such as ':abc').
        _ = parts.port
    except ValueError as exc:
        raise refuse(f"it does not parse: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise refuse(f"scheme {parts.scheme or '(none)'!r} is not http or https")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise refuse("it carries user information before the host")
    host = parts.hostname or ""
    if not host:
        raise refuse("it has no host")
    if host == "localhost":  # hostname is already lower-cased by urlsplit
        return url
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise refuse(f"host {host!r} is not a loopback IP address nor 'localhost'") from None
    # Only ::1 for IPv6: IPv4-mapped forms (::ffff:127.0.0.1) are refused on purpose,
    # the accepted set stays exactly the documented one.
    if not ip.is_loopback:
        raise refuse(f"host {host!r} is not a loopback address")
    return url
