"""The loopback guard: only loopback sandboxes are accepted."""

from __future__ import annotations

import pytest

from piexp.errors import UserError
from piexp.sandbox import ensure_loopback_url

ACCEPTED = [
    "http://127.0.0.1:8080/run_code",
    "http://127.0.0.1/run_code",
    "https://127.0.0.1:8443/run_code",
    "http://127.1.2.3:9000/run_code",
    "http://127.255.255.254/",
    "http://[::1]:8080/run_code",
    "http://localhost:8080/run_code",
    "HTTP://LOCALHOST:8080/run_code",
]

REFUSED = [
    "http://127.0.0.1.example.com/run_code",
    "http://localhost.example.com/run_code",
    "http://127.0.0.1@evil.com/run_code",
    "http://user:pw@127.0.0.1/run_code",
    "http://evil.com#@127.0.0.1/",
    "http://10.0.0.1:8080/run_code",
    "http://192.168.1.2/run_code",
    "http://0.0.0.0:8080/run_code",
    "http://[::]:8080/run_code",
    "http://[::ffff:127.0.0.1]/run_code",
    "http://2130706433/run_code",
    "http://0x7f000001/run_code",
    "http://sandbox.internal/run_code",
    "ftp://127.0.0.1/run_code",
    "file:///etc/passwd",
    "127.0.0.1:8080/run_code",
    "http:///run_code",
    "http://",
    "",
    "http://127.0.0.1:notaport/run_code",
    "http://127.0.0.1 .evil.com/",
]


@pytest.mark.parametrize("url", ACCEPTED)
def test_accepted(url):
    assert ensure_loopback_url(url) == url


@pytest.mark.parametrize("url", REFUSED)
def test_refused(url):
    with pytest.raises(UserError) as info:
        ensure_loopback_url(url)
    msg = str(info.value)
    assert repr(url) in msg
    assert "loopback" in msg and "localhost" in msg
