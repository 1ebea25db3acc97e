"""Harbor 0.25.0's rules for a task folder, a dataset manifest and its digests, written down
from its source (`harbor/models/task/config.py`, `models/task/task.py`,
`models/dataset/manifest.py`, `publisher/packager.py`, `verifier/verifier.py`) so that
piexp's Python 3.11 suite checks exported tasks against them where Harbor itself (Python
3.12+) cannot be imported. Kept independent of piexp's own code: the digest below is
written again from Harbor's packager, not imported from piexp.harbor."""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from pathlib import Path
from typing import Any

ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
NETWORK_MODES = {"no-network", "public", "allowlist"}
# TaskConfig's fields, and those of the sections piexp writes (pydantic's default ignores an
# unknown key; piexp's exports must hold none, so the check is stricter than Harbor's).
TOP_KEYS = {"schema_version", "task", "metadata", "verifier", "agent", "environment", "solution", "source",
            "multi_step_reward_strategy", "steps", "artifacts"}  # fmt: skip
TASK_KEYS = {"name", "version", "description", "authors", "keywords"}
VERIFIER_KEYS = {"timeout_sec", "env", "user", "environment_mode", "environment", "collect", "network_mode",
                 "allowed_hosts"}  # fmt: skip
AGENT_KEYS = {"timeout_sec", "user", "network_mode", "allowed_hosts"}
ENVIRONMENT_KEYS = {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus", "gpu_types",
                    "tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir", "allow_internet",
                    "network_mode", "allowed_hosts"}  # fmt: skip
DEFAULT_IGNORES = ("*.pyc", ".DS_Store", "*.swp", "*.swo", "*~")


def check_task_folder(folder: Path) -> dict[str, Any]:
    """Harbor's Task(folder) and Task.is_valid_dir for a single-step Linux task; returns
    the parsed task.toml. Raises AssertionError naming the broken rule."""
    config = tomllib.loads((folder / "task.toml").read_text(encoding="utf-8"))
    assert set(config) <= TOP_KEYS, set(config) - TOP_KEYS
    assert config["schema_version"] == "1.4"
    task = config["task"]
    assert set(task) <= TASK_KEYS and ORG_NAME.match(task["name"]) and ".." not in task["name"]
    assert isinstance(task.get("version"), str) and task["version"]
    assert isinstance(config.get("metadata", {}), dict)
    assert set(config["verifier"]) <= VERIFIER_KEYS and set(config["agent"]) <= AGENT_KEYS
    assert set(config["environment"]) <= ENVIRONMENT_KEYS
    for section in ("verifier", "agent"):
        timeout = config[section]["timeout_sec"]
        assert isinstance(timeout, float) and math.isfinite(timeout) and timeout > 0
    for section in ("verifier", "agent", "environment"):
        assert config[section].get("network_mode", "no-network") in NETWORK_MODES
    assert "steps" not in config, "a single-step task"
    assert config["environment"].get("docker_image") or (folder / "environment").is_dir()
    assert (folder / "instruction.md").is_file() and (folder / "tests" / "test.sh").is_file()
    assert (folder / "solution" / "solve.sh").is_file()
    for tree in ("tests", "solution", "environment"):
        for path in (folder / tree).rglob("*"):
            assert path.resolve().is_relative_to(folder.resolve()), f"{path} leaves the task"
    return config


def harbor_digest(folder: Path) -> str:
    """Packager.compute_content_hash: task.toml, instruction.md, README.md, trajectory.json
    and the files under environment/, tests/, solution/, steps/, less the default ignores
    and `.harborignore` files (a folder with ignore rules is not covered here),
    sorted by relative POSIX path; sha256 over `relpath\\0sha256(file)\\n`."""
    files = [folder / name for name in ("task.toml", "instruction.md", "README.md", "trajectory.json")]
    files = [path for path in files if path.exists()]
    for tree in ("environment", "tests", "solution", "steps"):
        if (folder / tree).is_dir():
            files += [path for path in sorted((folder / tree).rglob("*")) if path.is_file()]

    def ignored(relative: str) -> bool:
        name = relative.rsplit("/", 1)[-1]
        if name == ".harborignore":  # TaskFileFilter leaves the ignore files themselves out
            return True
        return "__pycache__" in relative.split("/")[:-1] or any(Path(name).match(p) for p in DEFAULT_IGNORES)

    relatives = sorted(path.relative_to(folder).as_posix() for path in files)
    outer = hashlib.sha256()
    for relative in relatives:
        if not ignored(relative):
            outer.update(f"{relative}\0{hashlib.sha256((folder / relative).read_bytes()).hexdigest()}\n".encode())
    return "sha256:" + outer.hexdigest()


def check_dataset(root: Path) -> dict[str, str]:
    """DatasetManifest.from_toml: [dataset] name org/name, each [[tasks]] an org/name and a
    sha256 digest; returns name -> digest."""
    manifest = tomllib.loads((root / "dataset.toml").read_text(encoding="utf-8"))
    assert set(manifest) <= {"schema_version", "dataset", "metadata", "tasks", "files"}
    assert ORG_NAME.match(manifest["dataset"]["name"])
    pins = {}
    for ref in manifest["tasks"]:
        assert set(ref) == {"name", "digest"} and ORG_NAME.match(ref["name"]) and DIGEST.match(ref["digest"])
        pins[ref["name"]] = ref["digest"]
    return pins


def parse_rewards(logs: Path) -> dict[str, float | int]:
    """Verifier.verify's reading: reward.json wins over reward.txt; an empty or missing file,
    an unparsable one, a non-numeric or non-finite value is an error, never a 0."""
    json_path, text_path = logs / "reward.json", logs / "reward.txt"
    if json_path.exists():
        import json

        assert json_path.stat().st_size > 0, "empty reward.json"
        rewards = json.loads(json_path.read_text())
        values = rewards.values() if isinstance(rewards, dict) else [rewards]
        for value in values:
            assert isinstance(value, (int, float)) and math.isfinite(value), f"bad reward {value!r}"
        return rewards
    if text_path.exists():
        value = float(text_path.read_text())
        assert math.isfinite(value)
        return {"reward": value}
    raise AssertionError(f"no reward file in {logs}")


def harbor_python() -> str | None:
    """A Python that imports Harbor 0.25.0's own code: $HARBOR_PYTHON, else the set-up's
    .venv-harbor (scripts/setup.sh makes it where a python3.12 exists), else None."""
    import os
    from pathlib import Path

    named = os.environ.get("HARBOR_PYTHON")
    if named:
        return named
    venv = Path(__file__).resolve().parents[2] / ".venv-harbor" / "bin" / "python"
    return str(venv) if (venv.parent.parent / ".harbor-0.25.0").exists() else None


HARBOR_PYTHON = harbor_python()
NO_HARBOR = "no Python with Harbor's code: set HARBOR_PYTHON, or run `make setup` where python3.12 exists"
