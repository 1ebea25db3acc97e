"""tcmalloc for the child processes piexp starts to compute with large buffers (the local
SkyRL server and the learner build's fit): glibc's malloc gives a freed block of more
than 32 MB (its highest mmap threshold) back to the kernel at once, so a program that
frees and allocates such buffers at every step (XLA's attention scores, KV caches and
logits; torch's activations and their gradients) faults them in again every time, and
the kernel's share of its CPU time grows to a fifth. tcmalloc keeps freed memory for the
next step; the values computed are the same (bench/allocator.py)."""

from __future__ import annotations

import functools
import os

__all__ = ["TCMALLOC", "allocator_env"]

#: gperftools' tcmalloc (Debian: libtcmalloc-minimal4, which scripts/setup.sh installs).
TCMALLOC = "libtcmalloc_minimal.so.4"


@functools.cache
def _installed(soname: str) -> bool:
    """Whether the dynamic linker's cache lists ``soname`` (checked without loading it:
    piexp's own process keeps glibc's malloc)."""
    import ctypes.util

    return ctypes.util.find_library(soname.removeprefix("lib").split(".so")[0]) == soname


def allocator_env(tcmalloc: bool = True) -> tuple[dict[str, str], str]:
    """The environment that makes a child process allocate with :data:`TCMALLOC`
    (``LD_PRELOAD``, in front of any preload already set) and the allocator's name; an
    empty environment and ``"glibc malloc"`` when ``tcmalloc`` is false or the library is
    not installed."""
    if not tcmalloc or not _installed(TCMALLOC):
        return {}, "glibc malloc"
    preload = " ".join(filter(None, [TCMALLOC, os.environ.get("LD_PRELOAD")]))
    return {"LD_PRELOAD": preload}, "tcmalloc"
