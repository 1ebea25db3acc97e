"""The releases piexp's SkyRL workarounds were made for: :data:`SKYRL_VERSION` in the
server venv, :data:`TINKER_SDK_VERSION` in piexp's own environment. ``pins.py`` checks
them, with every hook, at start-up."""

from __future__ import annotations

#: The skyrl release every server-side workaround was made for.
SKYRL_VERSION = "0.4.0"
#: The tinker SDK release (piexp's own venv, via tinker-cookbook) the proxy was made for.
TINKER_SDK_VERSION = "0.38.0"
