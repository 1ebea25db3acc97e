"""Errors a user can cause, reported as one clear paragraph without a traceback."""


class UserError(Exception):
    """A mistake in configuration, paths or URLs; the CLI prints it and exits with `exit_code`."""

    exit_code = 2


class ServiceUnavailableError(UserError):
    """The training service cannot be used (no API key, or it does not answer)."""

    exit_code = 3
