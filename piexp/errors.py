"""Errors a user can cause, and the one way they reach the user: a single wrapped
paragraph on stderr, no traceback, a non-zero exit code. Every entry point (the CLI,
a Hydra job, `python -m piexp.service.local_venv`) reports through this module."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable


class UserError(Exception):
    """A mistake in configuration, paths or URLs; the CLI prints it and exits with `exit_code`."""

    exit_code = 2


class ServiceUnavailableError(UserError):
    """The training service cannot be used (no API key, or it does not answer)."""

    exit_code = 3


class RunIncompleteError(UserError):
    """A part of piexp (the sandbox, the model service) failed, so the run could not
    finish: what it finished is kept, it is not marked complete, and the same command
    resumes it. Never the model's outcome."""

    exit_code = 4


def report_user_error(error: UserError) -> None:
    """Print a user error as one wrapped paragraph on stderr (no traceback)."""
    text = " ".join(str(error).split())
    # Never break inside a word: a path or a command in the message must stay copyable.
    print(textwrap.fill(f"piexp: {text}", width=100, break_on_hyphens=False, break_long_words=False), file=sys.stderr)


def exit_on_user_error(function: Callable[[], int | None]) -> int:
    """Run `function` and return its exit code; a UserError is reported and becomes its
    `exit_code`, Ctrl-C becomes 130 (the shell's convention)."""
    try:
        return int(function() or 0)
    except UserError as error:
        report_user_error(error)
        return error.exit_code
    except KeyboardInterrupt:
        print("piexp: interrupted", file=sys.stderr)
        return 130
