"""Loads an exported dataset with Harbor's own code (run by an interpreter that has the
`harbor` package, Python 3.12+; tests/harbor/test_export.py calls it when one is named by
HARBOR_PYTHON): each task folder as `harbor.models.task.task.Task` (task.toml parsed by
TaskConfig, instruction and tests found), `Task.is_valid_dir`, the digest by Harbor's
`Packager.compute_content_hash` against dataset.toml (parsed by DatasetManifest), and each
trajectory.json given as an argument with `--trajectory` by `Trajectory`. Prints one JSON
object; exits 1 on the first disagreement."""

import json
import sys
from pathlib import Path

from harbor.models.dataset.manifest import DatasetManifest
from harbor.models.task.task import Task
from harbor.models.trajectories import Trajectory
from harbor.publisher.packager import Packager


def main(argv: list[str]) -> int:
    report: dict = {"tasks": {}, "trajectories": []}
    if argv and argv[0] != "--trajectory":
        root = Path(argv.pop(0))
        manifest = DatasetManifest.from_toml_file(root / "dataset.toml")
        for ref in manifest.tasks:
            folder = root / ref.short_name
            task = Task(folder)
            assert Task.is_valid_dir(folder), f"{folder}: not a valid Harbor task dir"
            digest, _files = Packager.compute_content_hash(folder)
            assert "sha256:" + digest == ref.digest, f"{folder}: digest {digest} != {ref.digest}"
            assert task.name == ref.name, (task.name, ref.name)
            report["tasks"][ref.name] = {
                "digest": "sha256:" + digest,
                "schema_version": task.config.schema_version,
                "network_mode": task.config.environment.network_mode.value,
                "verifier_network_mode": task.config.verifier.network_mode.value,
                "metadata": task.config.metadata,
            }
    if argv and argv[0] == "--trajectory":
        for path in argv[1:]:
            trajectory = Trajectory.model_validate(json.loads(Path(path).read_text()))
            report["trajectories"].append({"path": path, "schema_version": trajectory.schema_version})
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
