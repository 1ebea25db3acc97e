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
    TRAIN_TRANSCRIPTS: Final = "train_transcripts.jsonl.gz"
    GROUP_OUTCOMES: Final = "group_outcomes.jsonl"  # every graded group's outcomes, the gate's decisions
    RL_RECORD: Final = "rl_train_config.json"
    WARM_START: Final = "warm_start.json"
    SUMMARY: Final = "summary.md"
    # The eval-train-eval loop.
    LOOP_RECORD: Final = "loop.json"
    BASE_EVAL_DIR: Final = "eval_base"
    TRAINED_EVAL_DIR: Final = "eval_trained"
