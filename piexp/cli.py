"""piexp's single entry point: `python -m piexp [SUBCOMMAND] [overrides...]`.

A subcommand (`piexp.commands.SUBCOMMANDS`) gets the rest of the command line; without
one, the command line is a run or a sweep (`piexp.commands.run`). A user error prints
one paragraph and exits non-zero."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from piexp.commands import SUBCOMMANDS
from piexp.console import quiet_third_party_deprecations
from piexp.errors import deliver_interrupts_quietly, exit_on_user_error
from piexp.quick_exit import freeze_the_heap_at_exit


def _subcommand(name: str) -> Callable[[list[str]], int | None]:
    module_name, function_name = SUBCOMMANDS[name].target.split(":")
    return getattr(importlib.import_module(module_name), function_name)


# The shell's exit status of a command that wrote into a closed pipe (128 + SIGPIPE).
CLOSED_PIPE_EXIT = 141


def _end_on_closed_pipe() -> NoReturn:
    # The reader has gone; what is still buffered must not fail again at exit with
    # "Exception ignored ... BrokenPipeError", so stdout now leads nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
    os.close(devnull)
    raise SystemExit(CLOSED_PIPE_EXIT)


class _QuietOnClosedPipe:
    """stdout, except that writing into a pipe whose reader has gone (`... | head`) ends
    the process quietly with the shell's status: Hydra (`--cfg job`) and rich catch the
    BrokenPipeError themselves and would print a traceback or exit 1."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _end_on_closed_pipe()

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _end_on_closed_pipe()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# Options of the run command line under which Hydra prints and exits, running nothing.
_PRINTING_OPTIONS = frozenset({"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion"})


def _only_prints(args: Sequence[str]) -> bool:
    if args and args[0] in SUBCOMMANDS:
        return not SUBCOMMANDS[args[0]].does_work
    return any(arg in _PRINTING_OPTIONS or arg.split("=", 1)[0] in _PRINTING_OPTIONS for arg in args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line. Output cut short by its reader (`... | head`) ends a command
    that only prints quietly; a run, a sweep or a command that plays episodes goes on with
    its console quiet (`piexp.console.outlive_closed_streams`)."""
    deliver_interrupts_quietly()
    freeze_the_heap_at_exit()
    args = list(sys.argv[1:] if argv is None else argv)
    stdout, stderr = sys.stdout, sys.stderr
    if _only_prints(args):
        sys.stdout = _QuietOnClosedPipe(stdout)
    else:
        from piexp.console import outlive_closed_streams

        outlive_closed_streams()
    try:
        return _main(args)
    except BrokenPipeError:  # a write that went around sys.stdout
        _end_on_closed_pipe()
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _main(args: list[str]) -> int:
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    quiet_third_party_deprecations()
    if args and args[0] in SUBCOMMANDS:
        command = _subcommand(args[0])
        return exit_on_user_error(lambda: command(args[1:]))
    # A subcommand does not pay for the run command's imports (config, Hydra, service).
    from piexp.commands import run

    return run.main(args)


if __name__ == "__main__":
    sys.exit(main())
