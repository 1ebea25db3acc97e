"""`python -m piexp reproduce DIR [--check-only] [hydra.run.dir=...]`: rerun a finished run
from its folder.

Why not Hydra's own `--experimental-rerun` or `--config-dir DIR/.hydra`: those reuse a
*config file*, which breaks for installed apps and loses the defaults list (Hydra issues
1805, 1868). piexp instead recomposes from the saved *overrides* (`.hydra/overrides.yaml`)
with the config tree it carries (source tree or the installed `piexp._conf`), and then
proves the recomposition is the same run before anything is started:

1. the recomposed config must equal the saved `.hydra/config.yaml` (else conf/ defaults
   changed since: the differing keys are named);
2. the task splits it builds must have exactly the digests in the run's `manifest.json`
   (else a task generator changed: the first mismatching task is named);
3. a train run's tinker-cookbook `rl.train.Config`, rebuilt without contacting any
   service, must equal its `rl_train_config.json` apart from run-local values (else
   piexp's mapping or the cookbook's defaults changed: the differing fields are named).

`--check-only` stops there (exit 0). Otherwise a new run is launched in a new folder (by
default `outputs/DATE/TIME` under the current directory) with the same overrides, forced
to a single run (a job of a preset sweep would otherwise relaunch the whole sweep), with
`reproduces=DIR` in its config and a `reproduces.json` saying what was verified.
"""

from __future__ import annotations

from piexp.run_folder import RunFolder

import argparse
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from piexp.commands.run import main as run_command
from piexp.commands.run import prevalidate
from piexp.config.compose import load, validate_saved
from piexp.config.differences import config_differences, shown
from piexp.config.search_path import with_search_path
from piexp.env.splits import build_splits
from piexp.errors import UserError
from piexp.launch.rl_record import RECORD_NAME, RUN_LOCAL_FIELDS, describe

_REPRODUCES = "reproduces"


def saved_overrides(run_dir: Path) -> list[str]:
    """The run's command-line overrides, without an earlier `reproduces=` (a reproduction
    of a reproduction records only its direct source)."""
    overrides = RunFolder(run_dir).overrides()
    return [item for item in overrides if item.split("=", 1)[0].lstrip("+~") != _REPRODUCES]


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    manifest = RunFolder(run_dir).manifest(needed_for="its tasks cannot be verified")
    assert manifest is not None
    if not isinstance(manifest.get("task_digests"), dict):
        raise UserError(f"{run_dir / RunFolder.MANIFEST} has no task_digests; the run's tasks cannot be verified.")
    return manifest


def verify(run_dir: Path) -> tuple[list[str], Any, dict[str, Any]]:
    """Recompose and verify the run in `run_dir`; returns (overrides, RunConfig, report)."""
    run_dir = run_dir.resolve()
    saved_cfg = RunFolder(run_dir).config()
    manifest = _read_manifest(run_dir)
    # The search path the run found its families on (--config-dir, hydra.searchpath,
    # entry points), spelled out again: the saved overrides hold only the run's own keys.
    overrides = with_search_path(saved_overrides(run_dir), list(manifest.get("config_search_path") or []))
    try:
        saved = validate_saved(saved_cfg, run_dir, overrides)
    except UserError as error:
        raise UserError(f"The saved config of {run_dir} is not valid for this piexp: {error}") from None
    config = load(overrides)
    differences = config_differences(saved.model_dump(mode="json"), config.model_dump(mode="json"))
    if differences:
        raise UserError(
            f"Recomposing {run_dir} from its overrides ({' '.join(overrides) or 'none'}) does not give "
            f"the config it ran with; piexp's config defaults changed since. Differences (saved -> "
            f"now): {shown(differences)}. Use the piexp version the run used (manifest.json: git_commit "
            f"{manifest.get('git_commit')}, piexp {(manifest.get('packages') or {}).get('piexp')})."
        )
    rl_record = verify_rl_record(run_dir, config)
    from piexp.harness.base import refuse_another_harness

    refuse_another_harness(manifest.get("harness"), config.harness, run_dir)
    splits = build_splits(config)
    _verify_family_origins(run_dir, manifest, splits.family_origins)
    built = {"train": splits.train, "eval": splits.eval}
    expected = manifest["task_digests"]
    for split in ("train", "eval"):
        want = list(expected.get(split) or [])
        tasks = built[split]
        for index, (task, digest) in enumerate(zip(tasks, want)):
            if task.task_digest != digest:
                raise UserError(
                    f"The task generators changed since the run in {run_dir}: {split} task #{index} "
                    f"({task.task_id}, family {task.family}) has digest {task.task_digest} now, but "
                    f"{digest} in the run's manifest.json. The run cannot be reproduced with this "
                    f"piexp; use the version it ran with (git_commit {manifest.get('git_commit')})."
                )
        if len(tasks) != len(want):
            raise UserError(
                f"The task generators changed since the run in {run_dir}: the {split} split has "
                f"{len(tasks)} tasks now but {len(want)} in the run's manifest.json."
            )
    report = {
        "reproduces": str(run_dir),
        "overrides": overrides,
        "verified_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "task_counts": {split: len(built[split]) for split in built},
        "rl_train_config": rl_record,
        "source_git_commit": manifest.get("git_commit"),
        "source_packages": manifest.get("packages"),
    }
    return overrides, config, report


def _verify_family_origins(run_dir: Path, manifest: dict[str, Any], now: dict[str, Any]) -> None:
    """Refuse a rerun whose family code, references, params or task file changed (runs
    recorded before family origins were kept have nothing to compare)."""
    recorded = manifest.get("family_origins")
    if not isinstance(recorded, dict):
        return
    for name, then in recorded.items():
        current = now.get(name)
        if not isinstance(then, dict) or current is None:
            continue
        _refuse_changed_files(run_dir, name, then, current)
        for part in ("code", "references", "params"):
            before, after = (then.get("digest") or {}).get(part), current["digest"].get(part)
            if before != after:
                what = "task file" if current.get("kind") == "task_file" and part == "code" else part
                where = current.get("path") or current.get("file")
                raise UserError(
                    f"Family {name!r} changed since the run in {run_dir}: its {what} ({where}) has digest "
                    f"{after} now, {before} in the run's manifest.json. The run cannot be reproduced with it; "
                    f"restore the family as it was (origin then: {then.get('target')}, "
                    f"{then.get('package') or then.get('file') or then.get('path')} {then.get('version') or ''})."
                )


def _refuse_changed_files(run_dir: Path, name: str, then: dict[str, Any], current: dict[str, Any]) -> None:
    """Name the file of a family that changed: a module of its package, or the reference of
    one language (runs recorded before per-file digests were kept have none to compare)."""
    before, now = then.get("files"), current.get("files")
    if not isinstance(before, dict) or not isinstance(now, dict):
        return
    changed = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key) or {}, now.get(key) or {}
        if old.get("sha256") != new.get("sha256"):
            what = f"{key.split(' ', 1)[0]} reference" if key.endswith(" reference") else "code"
            if key.startswith("task "):  # an imported Harbor task, by its name
                what = key
            if not old:
                changed.append(f"its {what} {new.get('file')} is new (not in the run's manifest.json)")
            elif not new:
                changed.append(f"its {what} ({old.get('file')}) is gone")
            else:
                changed.append(
                    f"its {what} ({new.get('file')}) has digest {new.get('sha256')} now, {old.get('sha256')} in "
                    "the run's manifest.json"
                )
    if changed:
        raise UserError(
            f"Family {name!r} changed since the run in {run_dir}: {'; '.join(changed)}. The run cannot be "
            f"reproduced with it; restore the family as it was (origin then: {then.get('target')}, "
            f"{then.get('package') or then.get('file')} {then.get('version') or ''})."
        )


def verify_rl_record(run_dir: Path, config: Any) -> str:
    """Rebuild the run's tinker-cookbook `rl.train.Config` (no service contacted) and
    compare it with the one it recorded; says what was checked, for reproduces.json."""
    # The cookbook's RL stack loads only to verify a train run.
    from piexp.launch.train import cookbook_config

    saved = RunFolder(run_dir).rl_record()
    if saved is None:
        return "not recorded" if config.mode.name == "train" else "not a train run"
    rebuilt = describe(cookbook_config(config, run_dir, "http://127.0.0.1:0/run_code"))
    differences = config_differences(saved, rebuilt, ignore=RUN_LOCAL_FIELDS)
    if differences:
        raise UserError(
            f"The tinker-cookbook rl.train.Config this piexp builds for {run_dir} differs from the one "
            f"the run recorded in {RECORD_NAME} (saved -> now): {shown(differences)}. piexp's mapping of the config "
            f"or the cookbook's defaults changed since; use the versions the run used (manifest.json)."
        )
    return "matches"


def _default_run_dir() -> Path:
    """Like Hydra's default (outputs/DATE/TIME), made unique, decided here so that it can
    be reported and `reproduces.json` written into it before the run starts."""
    now = datetime.now()
    base = Path("outputs") / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")
    candidate, n = base, 1
    while candidate.exists():
        candidate, n = base.with_name(f"{base.name}-{n}"), n + 1
    return candidate


def _quoted(value: str) -> str:
    if "'" in value:
        raise UserError(f"Cannot reproduce from {value}: its path contains a single quote.")
    return f"'{value}'"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="piexp reproduce",
        description="Recompose a run from its folder, verify its config and task digests, and rerun it.",
    )
    parser.add_argument("dir", type=Path, help="the run folder (a single run, or one job of a sweep)")
    parser.add_argument("--check-only", action="store_true", help="verify, do not run")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="if the new folder holds another run, move it aside (never deleted) instead of refusing",
    )
    parser.add_argument(
        "hydra_overrides",
        nargs="*",
        metavar="hydra.KEY=VALUE",
        help="Hydra settings for the new run, e.g. hydra.run.dir=DIR",
    )
    args = parser.parse_args(list(argv))
    not_hydra = [o for o in args.hydra_overrides if not o.startswith("hydra.")]
    if not_hydra:
        raise UserError(
            f"reproduce takes only hydra.* settings after DIR (got {' '.join(not_hydra)}): "
            "changing the config would not reproduce the run."
        )
    run_dir = Path(args.dir)
    if not run_dir.is_dir():
        raise UserError(
            f"Cannot reproduce {run_dir}: it is not a folder. Give a run folder "
            "(outputs/DATE/TIME, or multirun/DATE/TIME/N for a sweep job)."
        )
    overrides, config, report = verify(run_dir)
    counts = report["task_counts"]
    print(
        f"verified {run_dir}: the config recomposes identically and all {counts['train']} train "
        f"and {counts['eval']} eval task digests match manifest.json"
    )
    if args.check_only:
        return 0

    extra = list(args.hydra_overrides)
    chosen = [o for o in extra if o.split("=", 1)[0] == "hydra.run.dir"]
    new_dir = Path(chosen[-1].split("=", 1)[1]) if chosen else _default_run_dir()
    if not chosen:
        extra.append(f"hydra.run.dir={_quoted(str(new_dir))}")
    # hydra.mode=RUN: a job of a preset sweep (hydra.mode: MULTIRUN) is rerun alone.
    argv = [*overrides, f"{_REPRODUCES}={_quoted(report['reproduces'])}", "hydra.mode=RUN", *extra]
    # Checked before reproduces.json is written: a folder holding another run is refused.
    prevalidate(argv, False, False, args.replace)
    new_dir.mkdir(parents=True, exist_ok=True)
    (new_dir / RunFolder.REPRODUCES).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"reproducing into {new_dir}")

    return run_command(argv)
