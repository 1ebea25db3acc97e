"""A run folder, in one place: the name of every file it holds (`RunFolder.MANIFEST`, ...),
the format version it records (`manifest.json`'s `manifest_version`), and the readers of
its records (`RunFolder(path).manifest()`, `.config()`, `.metrics()`, ...), with each
fallback for a folder an older piexp wrote. Writers name a file through the class
(`run_dir / RunFolder.RESULTS`, or a constant of the module that owns its contents, bound
to the name here); commands read a folder through an instance. A new run-folder file is
one line here, then its writer and, where something reads it back, a reader here.

What each file is, for a person: docs/concepts.md's run-folder table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import yaml
from omegaconf import DictConfig, OmegaConf

from piexp.errors import UserError
from piexp.files import read_jsonl

#: The run folder's format: bumped when a file changes meaning, so that readers can tell a
#: folder written before it (`manifest.json`'s `manifest_version`; a folder that records
#: none reads as version 1).
FORMAT_VERSION: Final = 1


class RunFolder:
    """A run folder (`RunFolder(path)`) and, as class constants, the names of its files
    relative to the folder (`run_dir / RunFolder.MANIFEST`)."""

    RECORD_SUBDIR: Final = ".hydra"  # the run's record: its config, overrides, Hydra's own
    CONFIG: Final = ".hydra/config.yaml"
    OVERRIDES: Final = ".hydra/overrides.yaml"
    MANIFEST: Final = "manifest.json"  # versions, git state, task digests, base model
    JOB_LOG: Final = "job.log"  # what the console showed, as plain text
    VIEWER: Final = "viewer.html"
    # Check (a check run's, or the preflight of any run).
    CHECK: Final = "check.json"
    CHECK_TRANSCRIPTS: Final = "check_transcripts.jsonl.gz"
    # Eval.
    RESULTS: Final = "results.json"
    RESULTS_MD: Final = "results.md"
    RESULTS_PNG: Final = "results.png"
    EPISODES: Final = "episodes.jsonl"  # an eval's finished episodes (its resume)
    EVAL_STATE: Final = "eval_state.json"
    EVAL_TRANSCRIPTS: Final = "transcripts.jsonl.gz"
    # Train.
    METRICS: Final = "metrics.jsonl"  # tinker-cookbook's per-step metrics
    CHECKPOINTS: Final = "checkpoints.jsonl"  # tinker-cookbook's checkpoint records
    # A step's episodes as tinker-cookbook exports them (algo.rollout_json_export), by step and split.
    COOKBOOK_ROLLOUTS: Final = "iteration_{step:06d}/{split}_rollout_summaries.jsonl"
    TRAIN_TRANSCRIPTS: Final = "train_transcripts.jsonl.gz"
    GROUP_OUTCOMES: Final = "group_outcomes.jsonl"  # every graded group's outcomes, the gate's decisions
    RL_RECORD: Final = "rl_train_config.json"
    WARM_START: Final = "warm_start.json"
    SUMMARY: Final = "summary.md"
    # The eval-train-eval loop.
    LOOP_RECORD: Final = "loop.json"
    BASE_EVAL_DIR: Final = "eval_base"
    TRAINED_EVAL_DIR: Final = "eval_trained"
    # The run's record as Hydra writes it beside CONFIG and OVERRIDES.
    HYDRA_CONFIG: Final = ".hydra/hydra.yaml"
    # Markers and servers inside a run folder.
    COMPLETE_MARKER: Final = ".piexp/complete.json"  # the job finished (piexp.sweeps.marker)
    LOCAL_SERVICE_DIR: Final = "local_service"  # service=local's server state and checkpoints
    SERVER_LOG: Final = "local_service/server.log"
    # A run folder written before the group records held the binary gate's decisions here.
    LEGACY_BINARY_GATE: Final = "binary_gate.jsonl"
    # A sweep's folder.
    SWEEP_STATUS_JSON: Final = "sweep_status.json"
    SWEEP_STATUS_MD: Final = "sweep_status.md"
    SWEEP_STATUS_LOCK: Final = ".sweep_status.lock"
    # What a command writes into its output folder (`--out`), or into the run it reads:
    # compare (and the eval-train-eval loop, into its training run), rescore, replay,
    # reproduce (into the new run), calibrate.
    COMPARE_MD: Final = "compare.md"
    COMPARE_JSON: Final = "compare.json"
    COMPARE_PNG: Final = "compare.png"
    RESCORE_MD: Final = "rescore.md"
    RESCORE_JSON: Final = "rescore.json"
    RESCORE_PNG: Final = "rescore.png"
    REPLAY_MD: Final = "replay.md"
    REPLAY_JSON: Final = "replay.json"
    REPRODUCES: Final = "reproduces.json"
    CALIBRATION_MD: Final = "calibration.md"
    CALIBRATION_JSON: Final = "calibration.json"
    CALIBRATION_PNG: Final = "calibration.png"
    CALIBRATED_PRESET: Final = "calibrated.yaml"
    # Suffix of a folder moved aside by --replace (`<folder>.replaced-<UTC time>`; summaries skip it).
    REPLACED_MARK: Final = ".replaced-"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    def file(self, name: str) -> Path:
        """The path of one of the folder's files (`name`: one of the class's names)."""
        return self.path / name

    def is_run(self) -> bool:
        """Whether the folder holds a piexp run's record (its `.hydra/config.yaml`)."""
        return (self.path / self.CONFIG).is_file()

    # ---------------------------------------------------------------- the run's record

    def manifest(self, *, needed_for: str | None = None) -> dict[str, Any] | None:
        """The run's `manifest.json`. Missing or unreadable: None, or, when `needed_for` says
        what needs it, the user's error naming that. Of a newer format than this piexp reads
        (`manifest_version` above `FORMAT_VERSION`): always the user's error, since its files
        may mean something else now. A folder written before the version was recorded reads
        as version 1."""
        path = self.path / self.MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(manifest, dict):
                raise ValueError("not a JSON object")
        except FileNotFoundError:
            if needed_for is None:
                return None
            raise UserError(
                f"{self.path} has no {self.MANIFEST} (the run stopped before building its tasks), so {needed_for}."
            ) from None
        except (OSError, ValueError) as error:
            if needed_for is None:
                return None
            raise UserError(f"{path} cannot be read ({error}), so {needed_for}.") from None
        version = manifest.get("manifest_version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise UserError(
                f"{self.path} was written by a newer piexp (run-folder format {version}; this piexp reads up to "
                f"{FORMAT_VERSION}; piexp {(manifest.get('packages') or {}).get('piexp', 'unknown')} wrote it). Read "
                "it with that piexp or a newer one."
            )
        return manifest

    def harness(self) -> dict[str, str]:
        """Which harness played the run's episodes, with its versions (`harness_identity`
        of the manifest's `harness` entry); builtin where the manifest records none (a
        builtin run, or one recorded before harnesses were configurable)."""
        try:
            manifest = self.manifest() or {}
        except UserError:
            manifest = {}
        return harness_identity(manifest.get("harness"))

    def config(self) -> DictConfig:
        """The whole config the run composed (`.hydra/config.yaml`), as recorded; the user's
        error when the folder holds no run."""
        path = self.path / self.CONFIG
        if not path.is_file():
            raise UserError(f"{self.path} is not a piexp run folder: {path} does not exist.")
        try:
            loaded = OmegaConf.load(path)
        except (OSError, yaml.YAMLError) as error:
            raise UserError(f"{path} is not valid YAML ({error}); the run cannot be recomposed.") from None
        if not isinstance(loaded, DictConfig):
            raise UserError(f"{path} is not a mapping of settings; the run cannot be recomposed.")
        return loaded

    def overrides(self) -> list[str]:
        """The command-line overrides the run recorded (`.hydra/overrides.yaml`)."""
        path = self.path / self.OVERRIDES
        if not path.is_file():
            raise UserError(f"{self.path} is not a piexp run folder: {path} does not exist.")
        try:
            overrides = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        except (OSError, yaml.YAMLError) as error:
            raise UserError(f"{path} is not valid YAML ({error}); the run cannot be recomposed.") from None
        if not isinstance(overrides, list) or not all(isinstance(item, str) for item in overrides):
            raise UserError(f"{path} is not a list of overrides; the run cannot be recomposed.")
        return overrides

    def mode_name(self) -> str:
        """The run's mode (train, eval, check) as its config records it; "?" when unreadable."""
        try:
            mode = self.config().get("mode")
        except UserError:
            return "?"
        return str(mode.get("name", "?")) if isinstance(mode, DictConfig) else "?"

    def completion(self) -> dict[str, Any] | None:
        """The marker written last when the job finished (`.piexp/complete.json`), or None:
        none, or unreadable, which counts as not finished (a half-written marker must never
        skip a job)."""
        try:
            data = json.loads((self.path / self.COMPLETE_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and isinstance(data.get("config_hash"), str) else None

    # ---------------------------------------------------------------- results

    def json_record(self, name: str) -> Any:
        """One of the folder's JSON files (`results.json`, `check.json`, ...), parsed; None
        when it is missing or unreadable (a run that has not written it yet)."""
        try:
            return json.loads((self.path / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def metrics(self) -> list[dict[str, Any]]:
        """The rows of a train run's `metrics.jsonl`, tinker-cookbook's per-step metrics with
        the ones piexp adds (none for a run that is not a train run)."""
        return read_jsonl(self.path / self.METRICS)

    def rl_record(self) -> dict[str, Any] | None:
        """The RL loop's settings as the run handed them to tinker-cookbook
        (`rl_train_config.json`), or None when it has none (not a train run, or older than it)."""
        path = self.path / self.RL_RECORD
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise UserError(f"{path} cannot be read ({error}).") from None
        return record if isinstance(record, dict) else None

    def rollouts(self, split: str, step: int) -> list[dict[str, Any]]:
        """The trajectories of one training step's exported rollouts (`COOKBOOK_ROLLOUTS`;
        none when the run did not export them)."""
        return read_jsonl(self.path / self.COOKBOOK_ROLLOUTS.format(step=step, split=split))

    def rollout_steps(self, split: str) -> list[int]:
        """The steps whose rollouts of `split` the run exported, in order."""
        steps = []
        for path in self.path.glob(self.COOKBOOK_ROLLOUTS.replace("{step:06d}", "*").format(split=split)):
            suffix = path.parent.name.removeprefix("iteration_")
            if suffix.isdigit():
                steps.append(int(suffix))
        return sorted(steps)

    # ---------------------------------------------------------------- a tree of runs

    @classmethod
    def jobs_under(cls, root: Path) -> list[Path]:
        """Every run folder under `root` (itself included), in natural order (2 before 10);
        folders moved aside by --replace are not among them."""
        folders = {
            path.parent.parent
            for path in root.rglob(cls.CONFIG)
            if not any(cls.REPLACED_MARK in part for part in path.relative_to(root).parts)
        }
        if (root / cls.CONFIG).is_file():
            folders.add(root)

        def natural(path: Path) -> list[Any]:
            parts = path.relative_to(root).parts
            return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in parts]

        return sorted(folders, key=natural)


def harness_identity(entry: Any) -> dict[str, str]:
    """A harness's name and versions, `{"name": "pi", "pi_version": "1.6.0", "node_version":
    ...}`: a manifest's `harness` entry without its settings; `{"name": "builtin"}` for none."""
    if not isinstance(entry, dict) or not entry.get("name"):
        return {"name": "builtin"}
    return {key: str(value) for key, value in entry.items() if key == "name" or key.endswith("_version")}


def harness_label(identity: Any) -> str:
    """How a result names the harness that played it: `pi 1.6.0 (node 22.23.5)` (the name,
    its own version, the others in parentheses), `builtin`; a result recorded before
    harnesses (no identity) reads as builtin."""
    identity = identity if isinstance(identity, dict) and identity.get("name") else {"name": "builtin"}
    name = str(identity["name"])
    own = identity.get(f"{name}_version")
    others = [f"{key.removesuffix('_version')} {value}" for key, value in identity.items()
              if key.endswith("_version") and key != f"{name}_version"]  # fmt: skip
    return name + (f" {own}" if own else "") + (f" ({', '.join(others)})" if others else "")
