"""SandboxFusion's `/run_code` wire format and the language table.

Kept field-for-field compatible with SandboxFusion (`sandbox/server/sandbox_api.py`,
`sandbox/runners/types.py`) so that piexp can be pointed at a real SandboxFusion
deployment and so that third-party clients (tinker-cookbook's `SandboxFusionClient`)
work against the embedded server unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class LanguageSpec:
    """How one protocol language id is run: the runtime binary looked up on PATH, the
    name of the file the submitted `code` is written to inside the run directory, and
    how its memory is limited where no memory cgroup does it (see sandbox/command.py)."""

    language: str
    binary: str
    code_file: str
    # The rlimit that bounds memory without a cgroup: RLIMIT_AS, or RLIMIT_DATA for a
    # runtime that reserves huge virtual ranges (V8, Julia).
    memory_rlimit: Literal["address_space", "data"]
    # Without a cgroup, also size V8's heap from the limit (`--max-old-space-size`), so
    # that a memory bomb fails as a JS heap OOM.
    v8_heap_flag: bool = False
    flags: tuple[str, ...] = ()  # always passed before the code file


# SandboxFusion's language ids. The code file has a fixed, unusual name so that it does
# not collide with the workspace files a task ships (`solution.py`, `data.txt`, ...).
PROTOCOL_LANGUAGES: dict[str, LanguageSpec] = {
    # -B: no .pyc litter in the run dir.
    "python": LanguageSpec("python", "python3", "_sandbox_main.py", "address_space", flags=("-B",)),
    "nodejs": LanguageSpec("nodejs", "node", "_sandbox_main.js", "data", v8_heap_flag=True),
    "julia": LanguageSpec("julia", "julia", "_sandbox_main.jl", "data"),
}


class RunStatus(str, Enum):
    success = "Success"
    failed = "Failed"
    sandbox_error = "SandboxError"


class CommandRunStatus(str, Enum):
    finished = "Finished"
    error = "Error"
    time_limit_exceeded = "TimeLimitExceeded"


class RunCodeRequest(BaseModel):
    """SandboxFusion's request. Unknown extra fields are ignored, as FastAPI does."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: str
    compile_timeout: float = 10
    run_timeout: float = 10
    memory_limit_MB: int = -1
    stdin: Optional[str] = None
    files: dict[str, Optional[str]] = {}
    fetch_files: list[str] = []


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: Optional[float] = None
    return_code: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str = ""
    compile_result: Optional[CommandRunResult] = None
    run_result: Optional[CommandRunResult] = None
    executor_pod_name: Optional[str] = None
    files: dict[str, str] = {}


def sandbox_error(message: str) -> RunCodeResponse:
    """An answer meaning "the sandbox itself could not run this", never the program's fault."""
    return RunCodeResponse(status=RunStatus.sandbox_error, message=message)
