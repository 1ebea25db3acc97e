"""The one check of third-party code piexp patches or calls by a private name: a
:class:`Pin` names a package, the release piexp's uses were written against and every
:class:`Hook` (a function, method, class or module attribute) with the parameters piexp
relies on and, where piexp copied or rewrote the upstream function, a hash of that
upstream source. :func:`pin_problems` says what an installed release breaks: a hook
moved or renamed, another signature, a changed upstream source, another version.

The pins: tinker-cookbook in ``piexp/cookbook_compat.py``; the tinker SDK and SkyRL in
``piexp/service/compat/pins.py``, checked on every service path before a run starts
(SkyRL's inside the server venv, which runs this file's text as a script: it imports
only the standard library, and no ``from __future__``, for that).

``python -m piexp.pinned_hooks MODULE:NAME ...`` prints the source hash of each named
function as :attr:`Hook.source_sha256` wants it (in the server venv for SkyRL:
:func:`piexp.service.compat.pins.skyrl_source_hashes`).
"""

import hashlib
import importlib
import inspect
import json
import sys
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

_MISSING = object()
#: A hook named so stands for the module's ``if __name__ == "__main__":`` block.
MAIN_BLOCK = "__main__"


@dataclass(frozen=True)
class Hook:
    """One private name piexp patches or calls: ``module`` and the dotted ``name`` in it
    (``MAIN_BLOCK`` for its main block), the leading ``parameters`` piexp passes by
    position, the ``keywords`` it passes by name (for a class, its constructor's), the
    ``source_sha256`` (first 16 hex digits) of the upstream source piexp copied or
    rewrote, and ``used_by``: piexp's file and item that relies on it."""

    module: str
    name: str
    used_by: str
    parameters: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    source_sha256: str | None = None

    @property
    def where(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Pin:
    """A package's release piexp's hooks into it were written against (``version``; None:
    any release whose hooks fit), the hooks, the piexp file that lists them (``home``) and
    the command that installs the pinned release (``install``)."""

    package: str
    version: str | None
    hooks: tuple[Hook, ...]
    home: str
    install: str = ""
    check_version: bool = field(default=True, compare=False)


def source_sha256(target: Any) -> str:
    """The hash :attr:`Hook.source_sha256` compares: of ``target``'s source as
    ``inspect.getsource`` gives it (a wrapper's wrapped function's), or of a main block's text."""
    text = target if isinstance(target, str) else inspect.getsource(inspect.unwrap(target))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _main_block(module: Any) -> str | None:
    source = inspect.getsource(module)
    start = source.find('\nif __name__ == "__main__":')
    return None if start < 0 else source[start + 1 :]


def _resolve(hook: Hook) -> tuple[Any, str | None]:
    """The hooked object, or why it cannot be found."""
    try:
        module = importlib.import_module(hook.module)
    except Exception as error:  # noqa: BLE001 - any import failure is the finding
        return None, f"{hook.module} cannot be imported ({type(error).__name__}: {error})"
    if hook.name == MAIN_BLOCK:
        block = _main_block(module)
        return (block, None) if block is not None else (None, f"{hook.module} has no __main__ block")
    target: Any = module
    for part in hook.name.split("."):
        owner = target
        if inspect.getattr_static(owner, part, _MISSING) is _MISSING:
            return None, f"{hook.where} is missing (moved or renamed)"
        target = getattr(owner, part)
    return target, None


def hook_problem(hook: Hook) -> str | None:
    """What is wrong with ``hook`` in this interpreter's packages (None: it fits)."""
    target, problem = _resolve(hook)
    if problem is not None:
        return f"{problem}, used by {hook.used_by}"
    if hook.parameters or hook.keywords:
        try:
            found = list(inspect.signature(target).parameters)
        except (TypeError, ValueError):
            return f"{hook.where} has no signature to check, used by {hook.used_by}"
        leading = tuple(found[: len(hook.parameters)])
        absent = [name for name in hook.keywords if name not in found]
        if leading != hook.parameters or absent:
            return (
                f"{hook.where} takes ({', '.join(found)}), piexp passes "
                f"({', '.join((*hook.parameters, *(f'{k}=' for k in hook.keywords)))}), used by {hook.used_by}"
            )
    if hook.source_sha256 is not None:
        now = source_sha256(target)
        if now != hook.source_sha256:
            return (
                f"the source of {hook.where} changed since piexp copied it (sha256 {now}, piexp's copy "
                f"was made from {hook.source_sha256}), used by {hook.used_by}"
            )
    return None


def installed_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def pin_problems(pin: Pin, installed: str | None = None) -> list[str]:
    """Everything the installed ``pin.package`` (``installed``: the version to assume)
    breaks of ``pin``: another release (unless the pin takes any), then each hook's problem."""
    got = installed if installed is not None else installed_version(pin.package)
    problems = []
    if pin.check_version and pin.version is not None and got != pin.version:
        problems.append(f"{pin.package} {got or 'is not installed'} is installed, expected {pin.version}")
    return problems + [problem for hook in pin.hooks if (problem := hook_problem(hook)) is not None]


def mismatch_paragraph(pin: Pin, problems: list[str]) -> str:
    """The one paragraph a user sees when ``pin``'s hooks do not fit: what broke, where
    piexp lists them, and what to do."""
    release = f"{pin.package} {pin.version}" if pin.version else pin.package
    install = f"install that release (`{pin.install}`), or, " if pin.install and pin.version else ""
    return (
        f"piexp cannot run on the installed {pin.package}: "
        + "; ".join(problems)
        + f". piexp patches or calls these private names of {release} (listed in {pin.home}, each "
        f"with the piexp file and item that uses it): {install}after re-checking each use against the "
        "new release, update the pin, its hooks and their source hashes there."
    )


def pin_to_json(pin: Pin) -> str:
    return json.dumps(asdict(pin))


def pin_from_json(text: str) -> Pin:
    data = json.loads(text)
    hooks = tuple(
        Hook(**{**hook, "parameters": tuple(hook["parameters"]), "keywords": tuple(hook["keywords"])})
        for hook in data.pop("hooks")
    )
    return Pin(**data, hooks=hooks)


def report_problems(pin_json: str, tag: str = "PINS") -> None:
    """For a script in another interpreter (the server venv): print ``TAG`` and the JSON
    list of the pin's problems on one line."""
    print(f"{tag} " + json.dumps(pin_problems(pin_from_json(pin_json))))


def report_hashes(names: list[str], tag: str = "HASHES") -> None:
    """Print ``TAG`` and the JSON map of each ``MODULE:NAME`` to its source hash."""
    hashes = {}
    for spec in names:
        module, _, name = spec.partition(":")
        target, problem = _resolve(Hook(module, name, used_by=""))
        hashes[spec] = problem if problem is not None else source_sha256(target)
    print(f"{tag} " + json.dumps(hashes))


if __name__ == "__main__":
    report_hashes(sys.argv[1:])
