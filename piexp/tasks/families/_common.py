"""Helpers shared by family generators."""

from __future__ import annotations


def query_file(**values: object) -> str:
    """The `query.txt` file: per-task choices as `key=value` lines.

    Reference programs are one program per family, so whatever varies per task (a
    modulus, a filter) must be readable from the workspace, not only from the instruction.
    """
    return "".join(f"{key}={value}\n" for key, value in values.items())
