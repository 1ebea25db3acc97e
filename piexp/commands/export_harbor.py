"""`python -m piexp export-harbor [overrides] [split=train|eval|all] --out DIR [--replace]`:
the selected families' tasks (any family: piexp's or your own, with `--config-dir`) as
Harbor task folders, one per task and language, and a `dataset.toml` pinning each folder by
Harbor's content digest (docs/harbor.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from piexp.errors import UserError

USAGE = (
    "usage: python -m piexp export-harbor [--config-dir DIR] [family=...] [lang=...] [split=train|eval|all] "
    "[other overrides] --out DIR [--replace] [--name NAME]"
)
SPLIT_CHOICES = ("train", "eval", "all")


def main(argv: Sequence[str]) -> int:
    from piexp.commands.calibrate import _take_flag
    from piexp.commands.tasks import _take, _without_preflight
    from piexp.config.argv import rewrite_list_overrides
    from piexp.config.compose import load
    from piexp.config.search_path import take_config_dir
    from piexp.config.suggest import did_you_mean
    from piexp.harbor.export import export_tasks
    from piexp.tasks import build_splits

    if "-h" in argv or "--help" in argv:
        print(USAGE)
        return 0
    replace = "--replace" in argv
    args = take_config_dir([arg for arg in argv if arg != "--replace"])
    out_text, name = _take_flag(args, "--out"), _take_flag(args, "--name") or "tasks"
    for arg in args:
        if arg.startswith("-"):
            raise UserError(
                f"Unknown option {arg} for export-harbor.{did_you_mean(arg, ['--out', '--replace', '--name'])} {USAGE}"
            )
    if out_text is None:
        raise UserError(f"export-harbor needs --out DIR, the folder the task folders go into. {USAGE}")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or ".." in name:
        raise UserError(f"--name {name!r}: a Harbor dataset name is letters, digits and ._- (no '..'). {USAGE}")
    split = _take(args, "split", "all")
    if split not in SPLIT_CHOICES:
        raise UserError(f"split must be one of {', '.join(SPLIT_CHOICES)}, got {split!r}. {USAGE}")
    config = load(rewrite_list_overrides(_without_preflight(args)))
    train, evaluation, _report = build_splits(
        train_tasks_per_family=config.tasks.train_per_family if split != "eval" else 0,
        eval_tasks_per_family=config.tasks.eval_per_family if split != "train" else 0,
        seed=config.seed,
        families=config.families,
        params=config.family,
    )
    out = Path(out_text)
    languages = config.languages
    exported = export_tasks(
        out,
        [
            (train, {lang: languages[lang] for lang in config.train_languages}),
            (evaluation, {lang: languages[lang] for lang in config.eval_languages}),
        ],
        config.seed,
        name,
        replace=replace,
    )
    print(f"wrote {len(exported)} Harbor task folders and {out / 'dataset.toml'}")
    return 0
