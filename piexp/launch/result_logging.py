"""Eval, check and compare results where researchers already look: with a Weights &
Biases project set (`mode.wandb_project`, `compare --wandb-project`), a finished result
is logged through tinker-cookbook's `ml_log`, the backend training already logs through:
its headline numbers as metrics, its per-cell table as a W&B table, and its files (the
viewer, the report) as an artifact. The loggers' local files go to `<folder>/wandb/`
(`WANDB_MODE=offline` keeps everything there, for a machine without network)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from piexp.run_folder import harness_label

LOG_SUBDIR = "wandb"


def wandb_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("wandb") is not None


# The modes in which wandb needs no account: it keeps its files locally (or logs nothing).
_LOCAL_MODES = ("offline", "dryrun", "disabled")


def wandb_credentials(what: str) -> str | None:
    """Check, before any work, that W&B can log `what` (`mode.wandb_project=P`): returns
    the offline mode chosen (`WANDB_MODE=offline`, said to the user by the caller), None
    when credentials are there (`WANDB_API_KEY`, an identity token file, or a `wandb login`
    entry in the netrc file for the W&B host), and raises `ServiceUnavailableError`
    otherwise. Nothing is sent: an invalid key is found by W&B itself when the run logs."""
    import netrc
    import os
    from urllib.parse import urlsplit

    from piexp.errors import ServiceUnavailableError

    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in _LOCAL_MODES:
        return mode
    if os.environ.get("WANDB_API_KEY", "").strip() or os.environ.get("WANDB_IDENTITY_TOKEN_FILE", "").strip():
        return None
    host = urlsplit(os.environ.get("WANDB_BASE_URL", "").strip() or "https://api.wandb.ai").netloc
    path = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        entry = None
    if entry and entry[2]:
        return None
    raise ServiceUnavailableError(
        f"{what} logs to Weights & Biases, which has no credentials here: no WANDB_API_KEY and no "
        f"entry for {host} in {path}. Run `wandb login` (or export WANDB_API_KEY=...) in the shell that "
        "starts piexp; or set WANDB_MODE=offline to keep the W&B files in the run folder's wandb/ "
        "(`wandb sync` uploads them later); or leave the project unset. Nothing was run."
    )


def offline_note(mode: str) -> str:
    """What a run with W&B in a local mode says up front."""
    if mode == "disabled":
        return "W&B is disabled (WANDB_MODE=disabled): nothing is logged to it."
    return (
        f"W&B is offline (WANDB_MODE={mode}): its files stay in each run folder's wandb/; "
        "`wandb sync RUN/wandb/offline-run-*` uploads them later."
    )


def log_result(
    folder: Path,
    project: str,
    name: str,
    config: dict[str, Any],
    metrics: dict[str, float],
    tables: dict[str, tuple[list[str], list[list[Any]]]],
    files: Sequence[Path],
    kind: str,
    *,
    harness: dict[str, str] | None = None,
) -> str | None:
    """Log one result (`kind`: eval, check or compare) as the W&B run `name` of `project`;
    returns the run's URL (None offline). `harness`: the identity of the harness that
    played the result's episodes, named in the run's name and config."""
    import wandb
    from tinker_cookbook.utils import ml_log

    shown = name if harness is None else wandb_run_name(name, harness)
    if harness is not None:
        config = {**config, "harness_identity": harness}

    log_dir = folder / LOG_SUBDIR
    log_dir.mkdir(parents=True, exist_ok=True)
    # wandb.init puts its files into DIR/wandb/: handed the folder, they land in
    # folder/wandb/ beside the JSON log (as a training run's do), not in wandb/wandb/.
    backend = ml_log.WandbLogger(project=project, config=config, log_dir=folder, wandb_name=shown)
    logger = ml_log.MultiplexLogger([ml_log.JsonLogger(log_dir), backend])
    try:
        logger.log_metrics(metrics, step=0)
        run = backend.run
        for key, (columns, rows) in tables.items():
            run.log({key: wandb.Table(columns=columns, data=rows)}, step=0)
        artifact = wandb.Artifact(name=f"{name}-{kind}", type=f"piexp-{kind}")
        for path in files:
            if path.is_file():
                artifact.add_file(str(path))
        run.log_artifact(artifact)
        return logger.get_logger_url()
    finally:
        logger.close()


def wandb_run_name(folder_name: str, harness: dict[str, str]) -> str:
    """A W&B run's name: its folder's, and the harness that played it with its version."""
    return f"{folder_name} {harness_label(harness)}"


def eval_tables(results: dict[str, Any]) -> tuple[dict[str, float], dict[str, tuple[list[str], list[list[Any]]]]]:
    """An eval's metrics (overall pass@j and rewards, pass@1 and shaped per cell) and its
    pass@k table per family x language."""
    k = int(results["k"])
    overall = results["overall"]
    metrics = {f"overall/pass@{j}": float(overall[f"pass@{j}"]) for j in range(1, k + 1)}
    metrics.update(
        {"overall/reward_binary": overall["reward_binary"], "overall/reward_shaped": overall["reward_shaped"]}
    )
    metrics["overall/episodes_not_run"] = float(results.get("episodes_failed_to_run") or 0)
    columns = ["family", "language", "tasks", "episodes", "not_run", *(f"pass@{j}" for j in range(1, k + 1))]
    columns += ["reward_binary", "reward_shaped"]
    rows = []
    for family, row in results["cells"].items():
        for language, cell in row.items():
            metrics[f"pass@1/{family}/{language}"] = float(cell["pass@1"])
            metrics[f"reward_shaped/{family}/{language}"] = float(cell["reward_shaped"])
            rows.append(
                [family, language, cell["tasks"], cell["episodes"], cell.get("not_run", 0)]
                + [cell[f"pass@{j}"] for j in range(1, k + 1)]
                + [cell["reward_binary"], cell["reward_shaped"]]
            )
    return metrics, {"pass_at_k": (columns, rows)}


def check_tables(report: dict[str, Any]) -> tuple[dict[str, float], dict[str, tuple[list[str], list[list[Any]]]]]:
    """A check's metrics (passed, the oracle's pass rate, violations) and its table of
    episodes meeting their policy's expectation per family x language and policy."""
    metrics = {
        "check/passed": float(bool(report["passed"])),
        "check/oracle_pass_rate": float(report["oracle_pass_rate"]),
        "check/violations": float(len(report["violations"])),
    }
    rows = []
    for family, row in report["cells"].items():
        for language, cell in row.items():
            for policy, counts in (cell.get("policies") or {}).items():
                rows.append([family, language, policy, counts["ok"], counts["total"], cell["status"]])
    return metrics, {"expectations_met": (["family", "language", "policy", "met", "episodes", "cell"], rows)}


def compare_tables(result: dict[str, Any]) -> tuple[dict[str, float], dict[str, tuple[list[str], list[list[Any]]]]]:
    """A comparison's differences against its first run, with their 95% intervals, overall
    as metrics and per cell as a table."""
    metrics: dict[str, float] = {}
    rows = []
    for cell_name, cell in [("overall", result["overall"]), *result["cells"].items()]:
        for entry in cell["runs"]:
            if "diff_pass@1" not in entry:
                continue
            values = [entry["diff_pass@1"], entry["diff_pass@1_ci"], entry["diff_reward"], entry["diff_reward_ci"]]
            rows.append([cell_name, entry["run"], *values])
            if cell_name == "overall":
                metrics[f"diff_pass@1/{entry['run']}"] = float(entry["diff_pass@1"])
                metrics[f"diff_reward/{entry['run']}"] = float(entry["diff_reward"])
    columns = ["cell", "run", "diff_pass@1", "diff_pass@1_ci95", "diff_reward", "diff_reward_ci95"]
    return metrics, {"differences": (columns, rows)}
