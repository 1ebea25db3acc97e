"""The files of a run folder: every name in one place, and the format version a run folder
records (`manifest.json`'s `manifest_version`). Writers and readers name a file through
`RunFiles` (or a constant of the module that owns its contents, bound to the name
here), so a new run-folder file is one line here, then its writer and reader.

What each file is, for a person: docs/concepts.md's run-folder table."""

from __future__ import annotations

from typing import Final

#: The run folder's format: bumped when a file changes meaning, so that readers can tell a
#: folder written before it (`manifest.json`'s `manifest_version`).
FORMAT_VERSION: Final = 1


class RunFiles:
    """The names of a run folder's files, relative to the folder (`run_dir / RunFiles.MANIFEST`)."""

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
