"""One Harbor task folder read for piexp: its task.toml checked field by field, and what
piexp's sandbox can give it decided before anything runs (docs/harbor.md#importing-tasks).

A folder is **malformed** (the user's error, the whole import refused naming the folder)
when it lacks `task.toml` or `instruction.md`, when its `task.toml` is not TOML, names a
schema version piexp does not know, or has a field Harbor 0.25.0's schema does not have.

A well-formed task is **admitted** when piexp's sandbox gives it all it asks, and is
otherwise **refused** with each reason, never run half-way. Admitted:

- the environment: `[environment] docker_image`, or an `environment/Dockerfile` of only
  `FROM`, `WORKDIR`, `ENV` and `COPY` of files of `environment/` into the working folder,
  with the base image one that piexp's runtimes stand in for (`STAND_INS`); the working
  folder (`[environment] workdir`, else the Dockerfile's last `WORKDIR`) an absolute path
  outside the folders piexp's sandbox uses itself;
- no network for the agent and the verifier (`network_mode = "no-network"`, or the old
  `allow_internet = false`): Harbor's default, when a task says nothing, is public;
- one step, Linux, no GPU or TPU, no MCP servers, no healthcheck, no skills folder, no
  artifacts, no separate verifier environment or `[[verifier.collect]]` commands, no
  `user` to run as, no `${VAR}` taken from the host's environment;
- `solution/solve.sh` and `tests/test.sh` present, an instruction that is not empty, and
  workspace files that are UTF-8 text.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piexp.errors import UserError
from piexp.harbor.digest import DIGEST_PREFIX, task_folder_digest

# The schema versions whose fields this reader knows (Harbor 0.25.0 writes 1.4; the
# earlier ones are subsets of it).
SCHEMA_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4")
# Harbor 0.25.0's task.toml fields (harbor.models.task.config), by table.
_NETWORK = {"network_mode", "allowed_hosts"}
KNOWN_FIELDS: dict[str, set[str]] = {
    "": {"schema_version", "version", "task", "metadata", "verifier", "agent", "environment", "solution",
         "source", "multi_step_reward_strategy", "steps", "artifacts"},
    "task": {"name", "version", "description", "authors", "keywords"},
    "verifier": {"timeout_sec", "env", "user", "environment_mode", "environment", "collect", *_NETWORK},
    "agent": {"timeout_sec", "user", *_NETWORK},
    "environment": {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus",
                    "gpu_types", "tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir",
                    "allow_internet", "memory", "storage", *_NETWORK},
    "solution": {"env"},
}  # fmt: skip
# Base images piexp's runtimes stand in for (the sandbox shows this machine's /usr, with
# bash, coreutils and the runtimes of piexp's languages): an image name matches a prefix.
STAND_INS = ("ubuntu:", "debian:", "python:3", "node:", "julia:", "buildpack-deps:")
# Folders piexp's sandbox uses itself: a working folder may not be one or lie in one.
RESERVED = ("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "logs", "opt", "proc", "run", "sandbox",
            "sbin", "solution", "sys", "tests", "tmp", "usr", "var")  # fmt: skip
VERIFIER_TIMEOUT_S = 600.0  # Harbor's defaults when task.toml sets none
AGENT_TIMEOUT_S = 900.0
_HOST_VARIABLE = re.compile(r"\$\{[^}]*\}")


@dataclass(frozen=True)
class HarborVerifier:
    """What grades an imported task: its folder, Harbor's digest, and how its verifier runs.
    Carried by the task (`Task.verifier`); picklable, and equal for equal folders."""

    name: str  # Harbor's `org/name` (the folder's name where task.toml has no [task] name)
    folder: str  # absolute path of the task folder
    digest: str  # Harbor's `sha256:<hex>`
    workdir: str  # the working folder the workspace is shown at
    timeout_s: float  # [verifier] timeout_sec
    environment_env: tuple[tuple[str, str], ...] = ()  # the environment's variables (every phase's)
    env: tuple[tuple[str, str], ...] = ()  # the verifier's: the environment's and [verifier] env
    solution_env: tuple[tuple[str, str], ...] = ()  # the oracle's: the environment's and [solution] env
    agent_timeout_s: float = AGENT_TIMEOUT_S
    image: str = ""  # the base image piexp stands in for

    @property
    def tests_dir(self) -> Path:
        return Path(self.folder) / "tests"

    @property
    def solution_dir(self) -> Path:
        return Path(self.folder) / "solution"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "folder": self.folder, "digest": self.digest, "workdir": self.workdir}


@dataclass(frozen=True)
class ReadTask:
    """A well-formed task folder: admitted (`verifier` set) or refused (`reasons`)."""

    folder: Path
    name: str
    digest: str
    instruction: str = ""
    files: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    verifier: HarborVerifier | None = None
    reasons: tuple[str, ...] = ()


def read_task_folder(folder: Path) -> ReadTask:
    """The task in `folder`; a malformed one raises `UserError` naming the folder."""
    folder = Path(folder).resolve()
    for required in ("task.toml", "instruction.md"):
        if not (folder / required).is_file():
            raise UserError(
                f"Harbor task folder {folder} has no {required}; a task folder holds task.toml, instruction.md, "
                "environment/, solution/solve.sh and tests/test.sh (docs/harbor.md#importing-tasks)."
            )
    config = _parse_toml(folder)
    digest = task_folder_digest(folder)
    name = str((config.get("task") or {}).get("name") or folder.name)
    reasons: list[str] = []
    environment = config.get("environment") or {}
    verifier = config.get("verifier") or {}
    agent = config.get("agent") or {}
    reasons += _unsupported(config, environment, verifier, agent)
    image, dockerfile_workdir, copies, env_lines = _environment(folder, environment, reasons)
    workdir = str(environment.get("workdir") or dockerfile_workdir or "")
    misplaced = _workdir_problems(workdir)
    reasons += misplaced
    files = _workspace_files(folder, copies, workdir, reasons) if not misplaced else {}
    for script in ("solution/solve.sh", "tests/test.sh"):
        if not (folder / script).is_file():
            reasons.append(
                f"it has no {script} ({'the oracle piexp proves it solvable with' if 'solve' in script else 'the verifier'})"
            )
    instruction = _text(folder / "instruction.md", reasons, "instruction.md")
    if instruction is not None and not instruction.strip():
        reasons.append("its instruction.md is empty: there is nothing to ask the agent")
    solution = config.get("solution") or {}
    for table, values in (("[environment] env", environment.get("env")), ("[verifier] env", verifier.get("env")),
                          ("[solution] env", solution.get("env"))):  # fmt: skip
        if any(_HOST_VARIABLE.search(str(value)) for value in (values or {}).values()):
            reasons.append(
                f"its {table} takes ${{VAR}} values from the host's environment, which piexp does not pass in"
            )
    # The environment's variables (the Dockerfile's ENV, then [environment] env) in every
    # phase; each phase's own on top.
    base = {**env_lines, **{str(k): str(v) for k, v in (environment.get("env") or {}).items()}}
    if reasons:
        return ReadTask(folder, name, digest, metadata=dict(config.get("metadata") or {}), reasons=tuple(reasons))
    return ReadTask(
        folder,
        name,
        digest,
        instruction=instruction or "",
        files=files,
        metadata=dict(config.get("metadata") or {}),
        verifier=HarborVerifier(
            name=name,
            folder=str(folder),
            digest=digest,
            workdir=workdir,
            timeout_s=float(verifier.get("timeout_sec", VERIFIER_TIMEOUT_S)),
            environment_env=tuple(sorted(base.items())),
            env=tuple(sorted({**base, **_strings(verifier.get("env"))}.items())),
            solution_env=tuple(sorted({**base, **_strings(solution.get("env"))}.items())),
            agent_timeout_s=float(agent.get("timeout_sec") or AGENT_TIMEOUT_S),
            image=image,
        ),
    )


def _strings(values: Any) -> dict[str, str]:
    return {str(key): str(value) for key, value in (values or {}).items()}


def digest_hex(digest: str) -> str:
    """The hex of Harbor's `sha256:<hex>` (piexp's task digests are bare hex)."""
    return digest.removeprefix(DIGEST_PREFIX)


def _parse_toml(folder: Path) -> dict[str, Any]:
    where = folder / "task.toml"
    try:
        config = tomllib.loads(where.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UserError(
            f"{where} is not valid TOML ({error}); fix it, or leave the folder out of the import."
        ) from None
    version = config.get("schema_version", config.get("version"))
    if version is None or str(version) not in SCHEMA_VERSIONS:
        raise UserError(
            f"{where} has schema_version {version!r}; piexp reads Harbor task.toml schema versions "
            f"{', '.join(SCHEMA_VERSIONS)} (Harbor 0.25.0's). Set schema_version to one of them if the task "
            "follows that schema."
        )
    unknown = [key for key in config if key not in KNOWN_FIELDS[""]]
    for table in ("task", "verifier", "agent", "environment", "solution"):
        value = config.get(table)
        if value is not None and not isinstance(value, dict):
            raise UserError(f"{where}: [{table}] must be a table, got {type(value).__name__}.")
        unknown += [f"{table}.{key}" for key in value or {} if key not in KNOWN_FIELDS[table]]
    if unknown:
        raise UserError(
            f"{where} has field(s) Harbor 0.25.0's task schema does not know: {', '.join(sorted(unknown))}. "
            "A misspelt field would be ignored silently elsewhere; fix or remove it."
        )
    return config


def _unsupported(config: dict[str, Any], environment: dict, verifier: dict, agent: dict) -> list[str]:
    reasons = []
    if config.get("steps"):
        reasons.append("it is a multi-step task ([[steps]]); piexp plays one instruction per episode")
    if config.get("artifacts"):
        reasons.append("it collects artifacts; piexp collects no files from the environment")
    if str(environment.get("os", "linux")).lower() != "linux":
        reasons.append(f"its environment's os is {environment['os']!r}; piexp's sandbox is Linux")
    if environment.get("gpus") or environment.get("gpu_types") or environment.get("tpu"):
        reasons.append("it asks for a GPU or TPU; piexp's sandbox has none")
    for key, what in (("mcp_servers", "MCP servers (sidecars)"), ("healthcheck", "a healthcheck"),
                      ("skills_dir", "a skills folder")):  # fmt: skip
        if environment.get(key):
            reasons.append(f"its environment has {what}, which piexp's sandbox does not run")
    if verifier.get("environment") is not None or verifier.get("environment_mode") == "separate":
        reasons.append("its verifier runs in a separate environment; piexp runs it in the agent's sandbox")
    if verifier.get("collect"):
        reasons.append("its verifier collects from compose services ([[verifier.collect]])")
    for table, values in (("agent", agent), ("verifier", verifier)):
        if values.get("user") is not None:
            reasons.append(f"its [{table}] runs as user {values['user']!r}; piexp runs everything as its run user")
    network = environment.get("network_mode")
    if network is None and environment.get("allow_internet") is False:
        network = "no-network"
    if network != "no-network":
        said = f"network_mode {network!r}" if network is not None else "no network_mode (Harbor's default: public)"
        reasons.append(
            f'its [environment] has {said}; piexp\'s sandbox has no network (set network_mode = "no-network")'
        )
    for table, values in (("agent", agent), ("verifier", verifier)):
        if values.get("network_mode") not in (None, "no-network"):
            reasons.append(f"its [{table}] network_mode is {values['network_mode']!r}; piexp's sandbox has no network")
    return reasons


def _environment(
    folder: Path, environment: dict, reasons: list[str]
) -> tuple[str, str, list[tuple[str, str, bool]], dict[str, str]]:
    """(base image, the Dockerfile's working folder, its COPY (source, destination) pairs,
    its ENV values), noting in `reasons` what piexp cannot build."""
    env_dir = folder / "environment"
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if (env_dir / compose).exists():
            reasons.append(f"its environment/{compose} starts services (sidecars); piexp's sandbox runs one")
    dockerfile = env_dir / "Dockerfile"
    image = str(environment.get("docker_image") or "")
    workdir, copies, env = "", [], {}
    if dockerfile.is_file():
        lines = _dockerfile_lines(dockerfile)
        for number, line in lines:
            word, _, rest = line.partition(" ")
            word, rest = word.upper(), rest.strip()
            if word == "FROM":
                image = rest.split(" AS ")[0].split(" as ")[0].strip()
            elif word == "WORKDIR":
                workdir = posixpath.normpath(posixpath.join(workdir or "/", rest))
            elif word == "ENV" and "=" in rest and not rest.startswith("--"):
                for pair in rest.split():
                    key, _, value = pair.partition("=")
                    env[key] = value.strip('"')
            elif word in ("COPY", "ADD") and not rest.startswith("--") and len(rest.split()) == 2 and "://" not in rest:
                source, target = rest.split()
                into_folder = target.endswith("/") or target in (".", "./")
                copies.append((source, posixpath.normpath(posixpath.join(workdir or "/", target)), into_folder))
            else:
                reasons.append(
                    f"environment/Dockerfile line {number} ({line[:60]}) needs an image build; piexp builds none "
                    "(admitted: FROM, WORKDIR, ENV, COPY of files of environment/)"
                )
    elif not image:
        reasons.append("it has neither environment/Dockerfile nor [environment] docker_image")
    if image and not image.startswith(STAND_INS):
        reasons.append(
            f"its base image {image} is not one piexp's runtimes stand in for ({', '.join(p + '*' for p in STAND_INS)})"
        )
    return image, workdir, copies, env


def _dockerfile_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, instruction) with comments, blank lines and continuations folded."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append((start, " ".join((pending + stripped).split())))
        pending = ""
    if pending:
        lines.append((start, " ".join(pending.split())))
    return lines


def _workdir_problems(workdir: str) -> list[str]:
    if not workdir:
        return ["it names no working folder (a Dockerfile WORKDIR or [environment] workdir)"]
    parts = [part for part in workdir.split("/") if part]
    if not workdir.startswith("/") or not parts or ".." in parts:
        return [f"its working folder {workdir!r} is not an absolute path below /"]
    if parts[0] in RESERVED:
        return [f"its working folder {workdir} lies in /{parts[0]}, which piexp's sandbox uses itself"]
    return []


def _workspace_files(
    folder: Path, copies: list[tuple[str, str, bool]], workdir: str, reasons: list[str]
) -> dict[str, str]:
    """The files the Dockerfile copies into the working folder, by their path in it
    (Docker's rule: a folder's contents go into the target; a file goes into a target
    written as a folder, else becomes the target)."""
    context = (folder / "environment").resolve()
    files: dict[str, str] = {}
    for source, target, into_folder in copies:
        if target != workdir and not target.startswith(workdir.rstrip("/") + "/"):
            reasons.append(f"its Dockerfile copies {source} to {target}, outside the working folder {workdir}")
            continue
        origin = (context / source).resolve()
        if not origin.is_relative_to(context) or not origin.exists():
            reasons.append(f"its Dockerfile copies {source}, which is not a file or folder of environment/")
            continue
        into = posixpath.relpath(target, workdir)
        if origin.is_dir():
            members = [(p, posixpath.join(into, p.relative_to(origin).as_posix())) for p in sorted(origin.rglob("*"))]
        else:
            members = [(origin, posixpath.join(into, origin.name) if into_folder or into == "." else into)]
        for member, where in members:
            if not member.is_file():
                continue
            name = posixpath.normpath(where)
            text = _text(member, reasons, f"environment/{member.relative_to(context).as_posix()}")
            if text is not None:
                files[name] = text
    return files


def _text(path: Path, reasons: list[str], shown: str) -> str | None:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        reasons.append(f"{shown} is not UTF-8 text; piexp's workspaces hold text files")
        return None
