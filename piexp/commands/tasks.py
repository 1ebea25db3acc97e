"""`python -m piexp tasks [overrides] [n=N] [split=train|eval]`: print what the model
would see for the first N tasks of each selected family, the files (truncated) and
the answer; with `--params`, what each difficulty parameter of the selected families does."""

from __future__ import annotations

from collections.abc import Sequence

from piexp.errors import UserError

USAGE = (
    "usage: python -m piexp tasks [--config-dir DIR] [family=...] [lang=...] [n=N] [split=train|eval] "
    "[other overrides]; "
    "python -m piexp tasks family=NAME --params (each difficulty parameter, its range, default and effect)"
)


def _take(args: list[str], key: str, default: str) -> str:
    for arg in list(args):
        if arg.startswith(f"{key}="):
            args.remove(arg)
            return arg.split("=", 1)[1]
    return default


def _without_preflight(args: list[str]) -> list[str]:
    """A preview plays no reference: `mode.preflight=false` where the mode has one, so a
    task file without references previews as it evaluates (with a model, no preflight)."""
    from piexp.config.argv import rewrite_list_overrides
    from piexp.config.compose import compose

    if any(arg.split("=", 1)[0].lstrip("+~") == "mode.preflight" for arg in args):
        return args
    overrides = [arg for arg in args if not arg.startswith("-") and not arg.startswith(("n=", "split="))]
    try:
        mode = compose(rewrite_list_overrides(overrides)).get("mode") or {}
    except UserError:
        return args  # the load below reports it
    return [*args, "mode.preflight=false"] if "preflight" in mode else args


def main(argv: Sequence[str]) -> int:
    from piexp.config.argv import rewrite_list_overrides
    from piexp.config.compose import load
    from piexp.config.suggest import did_you_mean
    from piexp.env.prompt import workspace_prompt
    from piexp.tasks import build_tasks
    from piexp.tasks.preview import render_preview

    from piexp.config.search_path import take_config_dir

    args = list(argv)
    if any(arg in ("-h", "--help") for arg in args):
        print(USAGE)
        return 0
    args = take_config_dir(args)  # --config-dir DIR: families of your own, as in a run
    args = _without_preflight(args)
    if "--params" in args:
        args.remove("--params")
        from piexp.tasks import get_family
        from piexp.tasks.params_help import render_params_help

        config = load(rewrite_list_overrides(args))
        print("\n".join(render_params_help(get_family(name)) for name in config.families), end="")
        return 0
    for arg in args:
        if arg.startswith("-"):  # Hydra would call it an override it cannot lex
            raise UserError(f"Unknown option {arg} for tasks.{did_you_mean(arg, ['--params', '--help'])} {USAGE}")
    n_text = _take(args, "n", "1")
    split = _take(args, "split", "train")
    if not n_text.isdigit() or int(n_text) < 1:
        raise UserError(f"n must be a positive integer, got {n_text!r}. {USAGE}")
    if split not in ("train", "eval"):
        raise UserError(f"split must be train or eval, got {split!r}. {USAGE}")
    config = load(rewrite_list_overrides(args))
    languages = config.train_languages if split == "train" else config.eval_languages
    language = languages[0]
    tasks = build_tasks(
        split=split,
        tasks_per_family=int(n_text),
        seed=config.seed,
        families=config.families,
        params=config.family,
    )
    spec = config.languages[language]
    print(render_preview(tasks, lambda task: workspace_prompt(task, language, spec)))
    from piexp.tasks import get_family

    for name in config.families:
        # What a family read and left out (Harbor folders under skip_refused), and why.
        for refused, reasons in (get_family(name).origin().get("refused") or {}).items():
            print(f"left out of family {name}: {refused}: {'; '.join(reasons)}")
    return 0
