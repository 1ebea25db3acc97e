"""A behaviour RL has to find: a `learner-local` variant pre-trained without the oracle's
program for one family, then the researcher's loop on it (experiment=learn_offline, the
same as bench/learning.py, on the variant's folder), with a shuffled-reward control.

The variant (DISCOVERY) rolls out csv_agg's oracle episodes, in the behaviour mix and in
the copy tasks, with the `wrong` policy instead: it writes the reference program into a
helper file, then a `solution.py` that runs the helper and prints its answer plus one,
runs it and states what it printed. json_tree keeps the oracle. So the base model has
seen csv_agg's reference text and the wrapper, but never a csv_agg program that prints
the answer, nor a right csv_agg answer. To pass a csv_agg task it must write one: drop
the wrapper's `+ 1`, or write the reference as the solution. Shaped reward gives 0.3 for
the wrong program's episode, 0.15 for the crash, 1.0 for a pass.

The runs mix both families into every RL batch (experiment=learn_offline alone takes its
16 train tasks in task order, all json_tree's) and allow 512 tokens a turn (the wrong
program's turn is longer than the preset's 384, which cuts it off).

Usage: `python bench/discovery.py [OUT_DIR] [--seeds=0,1,2]`. The variant is built once
per machine (about 5 minutes) into piexp's cache beside learner-local's builds.

How to read it: per seed, held-out pass@1 per family (base, after RL, after the control)
and what the model's csv_agg solutions were: the wrapper with `+ 1`, the wrapper without
it, another program (the reference or anything else), or none. RL found the behaviour
when csv_agg's pass@1 rises beyond its interval while the control's does not; json_tree,
whose oracle the base model already shows, is the check that RL works at all on the
variant. Episodes moving from the crash program (0.15) to the wrapper with `+ 1` (0.3)
are RL doing what the shaped reward pays for among what the model samples, not a find.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

from rich.table import Table

from piexp.pretrain.recipe import LearnerRecipe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning import CONTROL, LOOP, run_piexp  # noqa: E402  (the same runs as the learning bench)
from record import RecordingConsole, record  # noqa: E402

FAMILY = "csv_agg"  # the family whose oracle program is withheld
# Both families in every RL batch: experiment=learn_offline takes its 16 train tasks in
# task order, all of them json_tree's, so RL there never sees a csv_agg task.
# The wrong program's turn (two writes: the reference, then the wrapper) is ~420 tokens of
# the learner's vocabulary; at the preset's 384 every such turn was cut off.
OVERRIDES = ["tasks.family_weights={json_tree:1,csv_agg:1}", "limits.max_generation_tokens=512"]


def variant() -> LearnerRecipe:
    from piexp.pretrain.build import RECIPE

    return dataclasses.replace(RECIPE, substitutes=((FAMILY, "oracle", "wrong"),))


def build() -> Path:
    from piexp.launch.sandbox import run_sandbox
    from piexp.pretrain.build import data_config, ensure_learner_model

    recipe = variant()
    sandbox = data_config(recipe).sandbox
    return ensure_learner_model(lambda: run_sandbox(sandbox), recipe)


KINDS = (
    "wrapper, + 1",
    "wrapper without + 1",
    "crash program",
    "another program",
    "no program, a read",
    "no tool call",
)


def solutions(eval_dir: Path) -> dict[str, int]:
    """The family's eval episodes by the last `solution` file the model wrote, or by what
    it did instead."""
    from piexp.transcripts.store import read_transcripts

    counts = dict.fromkeys(KINDS, 0)
    for episode in read_transcripts(eval_dir / "transcripts.jsonl.gz"):
        if episode.get("family") != FAMILY:
            continue
        calls = [call for message in episode.get("conversation") or [] for call in message.get("tool_calls") or []]
        written = [
            str(call.get("arguments", {}).get("content", ""))
            for call in calls
            if call.get("name") == "write" and str(call.get("arguments", {}).get("path", "")).startswith("solution")
        ]
        if written and "runpy" in written[-1]:
            kind = "wrapper, + 1" if "+ 1" in written[-1] else "wrapper without + 1"
        elif written:
            kind = "crash program" if "scripted crash" in written[-1] else "another program"
        else:
            kind = "no program, a read" if any(call.get("name") == "read" for call in calls) else "no tool call"
        counts[kind] += 1
    return counts


def main() -> int:
    from piexp.launch.comparison import compare, load_run
    from piexp.launch.loop import BASE_EVAL_DIR, TRAINED_EVAL_DIR

    args = [a for a in sys.argv[1:] if not a.startswith("--seeds")]
    seeds_arg = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--seeds=")), "0")
    console = RecordingConsole()
    console.print(f"building the variant without {FAMILY}'s oracle program (cached after the first build) ...")
    model = build()
    console.print(f"variant model {model}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args[0]) if args else Path(tmp)
        for seed in (int(s) for s in seeds_arg.split(",")):
            folder = out / f"seed_{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            name = f"model.name={model}"
            console.print(f"seed {seed}: RL run with evaluations before and after ...")
            loop_s, _ = run_piexp([*LOOP, name, *OVERRIDES, f"seed={seed}"], folder / "rl", folder / "rl.log")
            console.print(f"seed {seed}: control run (shuffled rewards) ...")
            control_s, _ = run_piexp(
                [*CONTROL, name, *OVERRIDES, f"seed={seed}"], folder / "control", folder / "control.log"
            )
            evals = [
                folder / "rl" / BASE_EVAL_DIR,
                folder / "rl" / TRAINED_EVAL_DIR,
                folder / "control" / TRAINED_EVAL_DIR,
            ]
            cells = compare([load_run(e) for e in evals])["cells"]
            table = Table(
                title=f"seed {seed}: held-out pass@1 by family (RL run {loop_s:.0f} s, control {control_s:.0f} s)"
            )
            for column in ("family", "base", "after RL", "diff", "after control", "control diff"):
                table.add_column(column)
            for cell, figures in sorted(cells.items()):
                base, rl, control = figures["runs"]
                table.add_row(
                    cell,
                    f"{base['pass@1']:.3f}",
                    f"{rl['pass@1']:.3f}",
                    f"{rl['diff_pass@1']:+.3f} ± {rl['diff_pass@1_ci']:.3f}",
                    f"{control['pass@1']:.3f}",
                    f"{control['diff_pass@1']:+.3f} ± {control['diff_pass@1_ci']:.3f}",
                )
            console.print(table)
            kinds = Table(title=f"seed {seed}: {FAMILY} eval episodes by the solution the model wrote")
            kinds.add_column("model")
            for kind in KINDS:
                kinds.add_column(kind)
            for label, eval_dir in zip(("base", "after RL", "after control"), evals, strict=True):
                kinds.add_row(label, *(str(n) for n in solutions(eval_dir).values()))
            console.print(kinds)
    record(__file__, console.tables, console.lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
