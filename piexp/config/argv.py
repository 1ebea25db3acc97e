"""Command-line rewriting in front of Hydra.

`python -m piexp family=arith lang=python,javascript` means *one* run whose family set
and language schedule are lists. Hydra reads an unbracketed comma list as a sweep and
refuses it outside multirun ("Ambiguous value"), so outside `-m` the list-valued keys
are rewritten to Hydra's list syntax. With `-m` nothing is rewritten: the comma list
keeps Hydra's sweep meaning (one job per value).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Keys whose value is a list in piexp's config, so a bare comma list can only mean a list.
LIST_KEYS = ("family", "lang", "eval_lang")

MULTIRUN_FLAGS = ("-m", "--multirun")

_ASSIGNMENT = re.compile(r"^(?P<prefix>[+~]{0,2})(?P<key>[A-Za-z_][\w.]*)=(?P<value>.*)$", re.S)


def is_multirun(argv: Sequence[str]) -> bool:
    return any(arg in MULTIRUN_FLAGS for arg in argv)


def _bare_comma_list(value: str) -> bool:
    # A value already in Hydra syntax (brackets, sweep functions, quotes) is left alone.
    if not value or "," not in value:
        return False
    if value[0] in "[{'\"" or "(" in value:
        return False
    return True


def _refuse_null_policy(arg: str) -> None:
    # Hydra reads a bare null (alone or in a sweep list) as "no value", which means the
    # model policy: the scripted policy that answers without tools is `guess` instead.
    match = _ASSIGNMENT.match(arg)
    if match and match["key"] == "policy":
        items = [item.strip() for item in match["value"].strip("[]").split(",")]
        if any(item.lower() == "null" for item in items):
            from piexp.config.schema import RENAMED_POLICY_HINT
            from piexp.errors import UserError

            raise UserError(f"{arg}: {RENAMED_POLICY_HINT}")


def rewrite_list_overrides(argv: Sequence[str]) -> list[str]:
    """Turn `family=a,b` into `family=[a,b]` (and the same for `lang`, `eval_lang`)
    unless the command is a multirun; `policy=null` is refused (see `_refuse_null_policy`)."""
    for arg in argv:
        _refuse_null_policy(arg)
    if is_multirun(argv):
        return list(argv)
    rewritten: list[str] = []
    for arg in argv:
        match = _ASSIGNMENT.match(arg)
        if match and match["key"] in LIST_KEYS and _bare_comma_list(match["value"]):
            items = [item.strip() for item in match["value"].split(",")]
            arg = f"{match['prefix']}{match['key']}=[{','.join(items)}]"
        rewritten.append(arg)
    return rewritten


def split_hydra_flags(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra's own flags (`--cfg job`, `-m`, ...) from config overrides."""
    flags_with_value = {
        "--cfg",
        "-c",
        "--package",
        "-p",
        "--config-path",
        "-cp",
        "--config-name",
        "-cn",
        "--config-dir",
        "-cd",
        "--info",
        "-i",
        "--experimental-rerun",
    }
    overrides: list[str] = []
    flags: list[str] = []
    index = 0
    args = list(argv)
    while index < len(args):
        arg = args[index]
        if arg.startswith("-"):
            flags.append(arg)
            takes_value = arg in flags_with_value and arg not in {"--info", "-i"}
            if takes_value and index + 1 < len(args):
                flags.append(args[index + 1])
                index += 1
            elif arg in {"--info", "-i"} and index + 1 < len(args) and "=" not in args[index + 1]:
                flags.append(args[index + 1])
                index += 1
        else:
            overrides.append(arg)
        index += 1
    return flags, overrides
