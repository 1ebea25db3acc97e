"""The versions piexp's SkyRL workarounds were made for, and the start-up check that
refuses any other: :data:`SKYRL_VERSION` in the server venv, :data:`TINKER_SDK_VERSION`
in piexp's own environment. An upgrade is then a deliberate act (re-check each item of
this package's docstring, then bump the pins), never a silent mis-training."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from piexp.errors import UserError

#: The skyrl release every server-side workaround was made for.
SKYRL_VERSION = "0.4.0"
#: The tinker SDK release (piexp's own venv, via tinker-cookbook) the proxy was made for.
TINKER_SDK_VERSION = "0.38.0"


class CompatVersionError(UserError):
    """The installed SkyRL server or tinker SDK is not the version piexp's workarounds fit."""


def _installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check_versions(server_versions: dict[str, str | None], *, sdk_version: str | None = None) -> None:
    """Refuse to run unless the server venv has skyrl :data:`SKYRL_VERSION` and this
    process has tinker SDK :data:`TINKER_SDK_VERSION`.

    ``server_versions`` maps package names to the versions installed in the server venv
    (as read by :func:`piexp.service.local_venv.server_versions`); ``sdk_version``
    defaults to this process's installed ``tinker``.
    """
    problems: list[str] = []
    skyrl = server_versions.get("skyrl")
    if skyrl != SKYRL_VERSION:
        problems.append(f"the server has skyrl {skyrl or 'not installed'}, expected {SKYRL_VERSION}")
    sdk = sdk_version if sdk_version is not None else _installed("tinker")
    if sdk != TINKER_SDK_VERSION:
        problems.append(f"piexp's environment has tinker SDK {sdk or 'not installed'}, expected {TINKER_SDK_VERSION}")
    if problems:
        raise CompatVersionError(
            "The self-hosted training server cannot be used safely: "
            + "; ".join(problems)
            + ". piexp's SkyRL workarounds (piexp/service/compat/) are pinned to those versions. "
            "Recreate the server environment with `python -m piexp.service.local_venv --force`, or, "
            "after re-checking each workaround against the new versions, update the pins."
        )
