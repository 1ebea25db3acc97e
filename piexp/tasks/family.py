"""The family protocol: what a task family is, whether it ships inside piexp or lives in the
user's own code. A family is a `Family` object (a module attribute the YAML's `_target_`
names): a name, a one-line summary, a frozen dataclass of integer difficulty params (each
field with a default and a `# one-line meaning` comment) with inclusive `limits` for every
field, a deterministic `generate(rng, params) -> (instruction, files, answer[, used])` that
draws only from `rng` (`used`, the per-task choices it made, is optional), and reference programs kept as real source files named
`<name>.<ext>` in `references_dir` (by default `refs/` beside the generator's module).
Limits are not cosmetic: they keep every answer within +/-2^53 (exact in every language)
and workspaces prompt-sized, so values outside them are refused. Whatever a generator
does wrong (raises, returns a non-integer answer or one outside the exact range) is
refused as the user's error, naming the family, the task and the file to fix; the page
docs/families.md says the same for people.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.languages import LANGUAGES
from piexp.languages import language as registered_language
from piexp.tasks.core import MAX_SAFE_INTEGER, SPLITS, Task, canonical_json, derive_rng
from piexp.tasks.difficulty import Difficulty

# The built-in families' reference programs (each family's default `refs/` folder).
REFS_DIR = Path(__file__).resolve().parent / "families" / "refs"

# generate(rng, params) -> (instruction, files, answer) or (instruction, files, answer, params_used)
Generator = Callable[
    [random.Random, Any], tuple[str, dict[str, str], int] | tuple[str, dict[str, str], int, dict[str, Any]]
]


class FamilyDefinitionError(UserError):
    """A family object that breaks the protocol (params without bounds, a bad default)."""


class ParamValueError(UserError):
    """A family parameter's value that is not an integer within its limits; says which
    family and parameter, so the config layer can name where the value was set."""

    def __init__(self, family: str, param: str, value: Any, problem: str) -> None:
        super().__init__(f"family {family!r}: {param}={value!r} {problem}")
        self.family, self.param, self.value, self.problem = family, param, value, problem

    def located(self, where: str) -> str:
        """The message with where the value was set (`set in conf/family/NAME.yaml`)."""
        return f"family {self.family!r}: {self.param}={self.value!r}, {where}, {self.problem}"


class GeneratorError(UserError):
    """A family's generator that failed on a valid setting (raised, returned the wrong
    shape, a non-integer answer or one outside +/-2^53): a bug in its code, not a setting
    to change. Its message starts "generator error"."""


@dataclass(frozen=True)
class Family:
    name: str
    summary: str
    params_type: type
    # field name -> (min, max) inclusive; every field must have one.
    limits: Mapping[str, tuple[int, int]]
    generate: Generator
    # Where `<name>.py`, `<name>.js`, `<name>.jl` live; None = `refs/` beside the generator.
    references_dir: Path | None = None
    # Which parameters make tasks harder, and the levels 1..L (piexp.tasks.difficulty); None = undeclared.
    difficulty: Difficulty | None = None

    def __post_init__(self) -> None:
        where = f"family {self.name!r} ({self.source_file})"
        if not self.name.isidentifier():
            raise FamilyDefinitionError(f"{where}: its name must be an identifier (letters, digits, _).")
        if not dataclasses.is_dataclass(self.params_type):
            raise FamilyDefinitionError(f"{where}: params_type must be a dataclass of integer parameters.")
        names = [f.name for f in dataclasses.fields(self.params_type)]
        unbounded = [name for name in names if name not in self.limits]
        if unbounded:
            raise FamilyDefinitionError(
                f"{where}: parameter(s) {', '.join(unbounded)} have no bounds; add each to limits= as "
                f"name: (lowest, highest) (bounds keep answers exact in every language and workspaces small)."
            )
        extra = sorted(set(self.limits) - set(names))
        if extra:
            raise FamilyDefinitionError(f"{where}: limits name {', '.join(extra)}, which params_type does not have.")
        try:
            defaults = self.params_type()
        except TypeError as error:
            raise FamilyDefinitionError(f"{where}: every parameter needs a default ({error}).") from None
        for name in names:
            low, high = self.limits[name]
            value = getattr(defaults, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise FamilyDefinitionError(
                    f"{where}: the default {name}={value!r} must be an integer within its limits [{low}, {high}]."
                )
        if not callable(self.generate):
            raise FamilyDefinitionError(f"{where}: generate must be a function (rng, params) -> task.")
        if self.difficulty is not None:
            self._check_difficulty(where, names)

    def _check_difficulty(self, where: str, names: list[str]) -> None:
        assert self.difficulty is not None
        problems = self.difficulty.problems(names, self.limits)
        for number, level in enumerate(self.difficulty.levels if not problems else (), start=1):
            try:
                self.make_params(level)
            except UserError as error:  # the params' own check (a prime modulus, a fitting grid)
                problems.append(f"level {number}: {error}")
        if problems:
            raise FamilyDefinitionError(f"{where}: {'; '.join(problems)}.")

    def level_params(self, level: int) -> dict[str, int]:
        """The parameter values of difficulty `level`; refused for a family without levels or a level it lacks."""
        if self.difficulty is None:
            raise UserError(
                f"family {self.name!r} ({self.source_file}) declares no difficulty levels; add "
                "difficulty=Difficulty(harder=..., levels=...) to its Family (docs/families.md)."
            )
        return self.difficulty.params(self.name, level)

    @property
    def source_file(self) -> Path:
        """The file that defines the generator: the family's code."""
        try:
            return Path(inspect.getsourcefile(self.generate) or "").resolve()
        except TypeError:
            return Path("<unknown>")

    @property
    def refs_dir(self) -> Path:
        return Path(self.references_dir) if self.references_dir is not None else self.source_file.parent / "refs"

    @property
    def defaults(self) -> Any:
        return self.params_type()

    def param_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.params_type))

    def make_params(self, overrides: Mapping[str, Any] | None = None) -> Any:
        """Defaults updated by ``overrides``; unknown keys and out-of-range values are refused."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.param_names()))
        if unknown:
            raise UserError(
                f"family {self.name!r} has no parameter(s) {', '.join(unknown)}; "
                f"its parameters are: {', '.join(self.param_names())}"
            )
        params = dataclasses.replace(self.defaults, **overrides)
        for name in self.param_names():
            value = getattr(params, name)
            low, high = self.limits[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParamValueError(self.name, name, value, "is not an integer; the parameter must be one")
            if not low <= value <= high:
                raise ParamValueError(
                    self.name,
                    name,
                    value,
                    f"is outside [{low}, {high}] (the limits keep answers exact in every language and "
                    "workspaces prompt-sized)",
                )
        check = getattr(params, "check", None)
        if check is not None:
            problem = check()
            if problem:
                raise UserError(f"family {self.name!r}: {problem}")
        return params

    def reference_file(self, language: str) -> Path:
        return self.refs_dir / f"{self.name}.{registered_language(language).extension}"

    def reference_languages(self) -> tuple[str, ...]:
        """The languages this family has a reference program in."""
        return tuple(name for name in LANGUAGES if self.reference_file(name).is_file())

    def reference(self, language: str, task_id: str | None = None) -> str:
        """Source of the reference program in `language` (a registry name); one program
        serves every task of a generated family, so `task_id` is not needed."""
        path = self.reference_file(language)
        if not path.is_file():
            raise UserError(
                f"family {self.name!r} has no {language} reference ({path} does not exist); it has "
                f"references in: {', '.join(self.reference_languages()) or 'no language'}."
            )
        return _read_reference(path)

    def tasks(self, split: str, count: int, seed: int, params: Any) -> list[Task]:
        """Tasks 0..count-1 of `split`, each from its own stream keyed by (seed, split, name, i)."""
        return [self.task(split, index, seed, params) for index in range(count)]

    def task(self, split: str, index: int, seed: int, params: Any) -> Task:
        rng, stream = derive_rng(seed, split, self.name, index)
        where = (
            f"generator error in family {self.name!r} ({self.source_file}), task {index} of the {split} split "
            f"(seed {seed})"
        )
        try:
            produced = self.generate(rng, params)
        except UserError:
            raise
        except Exception as error:  # the user's generator: any exception is a bug to report
            raise GeneratorError(
                f"{where}: the generator raised {type(error).__name__}: {error}. Fix generate() in "
                f"{self.source_file}, then preview with `python -m piexp tasks --config-dir DIR family={self.name}`."
            ) from None
        if not (isinstance(produced, tuple) and len(produced) in (3, 4)):
            raise GeneratorError(
                f"{where}: generate() must return (instruction, files, answer), or (instruction, files, answer, "
                f"params_used) with the per-task choices it made; it returned {_shape(produced)}."
            )
        # The per-task choices are optional: a generator with none returns three values.
        instruction, files, answer, used = produced if len(produced) == 4 else (*produced, {})
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise GeneratorError(
                f"{where}: the answer {answer!r} is a {type(answer).__name__}, not an integer; "
                "generate() must return a Python int."
            )
        if not -MAX_SAFE_INTEGER < answer < MAX_SAFE_INTEGER:
            raise GeneratorError(
                f"{where}: the answer {answer} lies outside +/-2^53, which JavaScript cannot hold exactly; "
                "lower the family's limits so every answer stays within it."
            )
        if not isinstance(instruction, str) or not isinstance(files, Mapping) or not isinstance(used, Mapping):
            raise GeneratorError(f"{where}: instruction must be a str, files and params_used dicts.")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise GeneratorError(f"{where}: files must map file names (str) to contents (str).")
        return Task(
            task_id=f"{split}-{self.name}-{seed}-{index:05d}",
            family=self.name,
            split=split,
            instruction=instruction,
            files=files,
            answer=str(answer),
            # The stream key makes (family, params) identify the generator stream, so
            # the repeated-params check catches two tasks drawn from the same stream.
            params={**dataclasses.asdict(params), **used, "stream": stream},
        )

    def origin(self) -> dict[str, Any]:
        """Where the family's code comes from (module, file, package and version)."""
        return {"kind": "generator", **code_origin(self.generate, self.source_file)}

    def file_digests(self) -> dict[str, dict[str, str]]:
        """A digest of every file the family runs, each under a key that names what it is:
        `module NAME` for the generator's module and every module of the user's package it
        imports (helpers, the package's `__init__.py`), `LANGUAGE reference` for each
        reference program. `reproduce` compares them to name the one file that changed."""
        module = getattr(self.generate, "__module__", None) or ""
        files = {f"module {name}": path for name, path in imported_package_modules(module, self.source_file).items()}
        files.update({f"{name} reference": self.reference_file(name) for name in self.reference_languages()})
        return {key: {"file": str(path), "sha256": file_digest(path)} for key, path in files.items()}

    def digest(self, params: Any) -> dict[str, str]:
        """Digests of the family's code, its reference programs and the params used."""
        references = {name: file_digest(self.reference_file(name)) for name in self.reference_languages()}
        return {
            "code": file_digest(self.source_file),
            "references": hashlib.sha256(canonical_json(references).encode()).hexdigest(),
            "params": hashlib.sha256(canonical_json(dataclasses.asdict(params)).encode()).hexdigest(),
        }


def _shape(value: Any) -> str:
    """What a generator returned, for its error: a tuple's length, or the type."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} value{'s' if len(value) != 1 else ''}"
    return f"a {type(value).__name__}"


@cache
def _read_reference(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def code_origin(obj: Any, source_file: Path) -> dict[str, Any]:
    """Module, source file, and the installed distribution (with version) providing it."""
    from importlib import metadata

    module = getattr(obj, "__module__", None) or ""
    top = module.split(".")[0]
    distributions = _distributions_of(top) if top else []
    distribution = distributions[0] if distributions else None
    version = None
    if distribution is not None:
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            version = None
    return {"module": module, "file": str(source_file), "package": distribution, "version": version}


def imported_package_modules(module: str, source_file: Path) -> dict[str, Path]:
    """`module` (defined in `source_file`) and, transitively, every module of its own
    top-level package that it imports, with the packages' `__init__.py` files that run on
    the way: the code a family's tasks depend on beyond the file that defines it. Found
    from the sources' import statements (what another process importing the family runs),
    not from what this process happens to have imported. piexp's own modules are piexp's
    version, recorded apart; they are not followed."""
    import ast
    import importlib.util

    top = module.split(".")[0]
    if not module or top == "piexp" or not source_file.is_file():
        return {module or source_file.stem: source_file}

    def in_package(name: str) -> bool:
        return name == top or name.startswith(f"{top}.")

    def file_of(name: str) -> Path | None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # an attribute imported from a module, or a broken one
            return None
        origin = spec.origin if spec is not None else None
        return Path(origin).resolve() if origin and origin.endswith(".py") else None

    found: dict[str, Path] = {module: source_file}
    pending = [module]
    while pending:
        name = pending.pop()
        path = found[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        candidates = [".".join(name.split(".")[:depth]) for depth in range(1, name.count(".") + 1)]
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                candidates += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*base_parts, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                candidates += [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for candidate in candidates:
            # Importing a.b.c runs a/__init__.py and a/b/__init__.py too.
            parts = candidate.split(".")
            for depth in range(1, len(parts) + 1):
                prefix = ".".join(parts[:depth])
                if prefix in found or not in_package(prefix):
                    continue
                located = file_of(prefix)
                if located is not None:
                    found[prefix] = located
                    pending.append(prefix)
    return dict(sorted(found.items()))


@cache
def _packages_distributions() -> Mapping[str, list[str]]:
    """Top-level package -> distributions providing it (a scan of everything installed)."""
    from importlib import metadata

    return metadata.packages_distributions()


@cache
def _distributions_of(top: str) -> list[str]:
    """The distributions providing top-level package `top`: those whose `top_level.txt`
    names it (a small file each), else, for distributions that write none, the full scan
    of every installed file list (about 0.2 s), as `packages_distributions` does."""
    from importlib import metadata

    named = []
    for distribution in metadata.distributions():
        listed = distribution.read_text("top_level.txt")
        if listed is not None and top in listed.split():
            named.append(distribution.metadata["Name"])
    return named or _packages_distributions().get(top, [])


def check_exact(family: str, *values: int) -> None:
    """Generator-side guard: refuse (as a bug) any value JavaScript could not hold exactly."""
    for value in values:
        if not -(2**53) < value < 2**53:
            raise AssertionError(f"{family}: value {value} exceeds +/-2^53")


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
