"""An interpreter's exit without its last walk over the heap.

At exit the interpreter collects garbage once more, walking every object still alive:
after torch, transformers and matplotlib are imported that walk is about 0.7 s of CPU on a
2-core machine, paid by every command and by every worker of a parallel sweep. Frozen
(`gc.freeze`), the objects alive at exit are skipped. Nothing piexp must finish depends on
that walk: files are closed by `with`, servers, sandboxes and child processes by their
owners before the command returns or by atexit handlers, which all still run (the freeze
skips only the collection after them). What goes unfinalized is garbage in reference
cycles left at exit, whose memory the operating system takes back with the process."""

from __future__ import annotations

import atexit
import gc

_registered = False


def freeze_the_heap_at_exit() -> None:
    """Freeze the heap at this process's exit (registered once per process, by the command
    line and by a sweep's job on entry; atexit runs the handlers registered after it
    first, and those registered before it after it, all of them in any case)."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True
