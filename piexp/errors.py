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


class ThirdPartyMismatchError(UserError):
    """An installed third-party package does not fit the private names piexp patches or
    calls (piexp.pinned_hooks names which)."""


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


def deliver_interrupts_quietly() -> None:
    """Ctrl-C that lands in code Python cannot raise from (a weakref callback of the import
    system, a ``__del__``) was printed by the interpreter as "Exception ignored in ...",
    a traceback and ``KeyboardInterrupt``, and then lost. In this process such an
    interrupt is printed by no one and raised again in the main thread, where piexp's
    handlers turn it into one line and exit 130. Installing it twice changes nothing."""
    import _thread
    import signal
    import threading

    previous = sys.unraisablehook
    if getattr(previous, "piexp_delivers_interrupts", False):
        return
    main_thread = threading.main_thread().ident or threading.get_ident()

    def interrupt_main_thread() -> None:
        signal.pthread_kill(main_thread, signal.SIGINT)

    def deliver(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # SIGINT to the main thread again (it also ends a blocking call there), sent
            # from a new thread started without waiting for it: raised inside this hook,
            # Python would report it as unraisable again.
            _thread.start_new_thread(interrupt_main_thread, ())
            return
        previous(unraisable)

    deliver.piexp_delivers_interrupts = True  # type: ignore[attr-defined]
    sys.unraisablehook = deliver


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
