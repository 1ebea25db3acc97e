"""Where a step of `learner-local`'s fit spends its time, and what computing the last
layer at the weighted positions only saves (piexp.pretrain.training.hidden_at) against
the whole model's forward pass (`model.model(...).last_hidden_state[mask]`, the baseline,
measured in the same run on the same batches).

The batches are the fit's own kinds, from real scripted episodes of the recipe's data
(`--tasks` train tasks per family, rolled out in an embedded sandbox like a build's):
one behaviour-mix episode (the fit runs `batch_sequences` of them a step, one at a time),
a batch of whole answer turns (`whole_turn_batch_sequences`, from the recipe's
`whole_turns_from_step` on) and a batch of answer windows. For each: forward and
backward seconds, median of `--repeats` batches after 2 warm-ups, with the recipe's
model on the machine's threads (at most 2), both ways alternately; then a late step's
sum of the three at the recipe's counts.

Usage: `python bench/pretrain_fit.py [--tasks=40] [--repeats=10]`.

How to read it: the ratio is the last layer at the weighted positions only over the whole
model's pass; the late step's row is what a step of the fit's second half costs, so it is
the figure the build's fit time follows. The rest of a step (the sampled softmax, the
optimiser) is a few hundredths of a second and not measured here.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any


def episodes(tasks_per_family: int) -> tuple[list[Any], list[Any], list[Any]]:
    """Mix sequences, whole answer turns and answer windows of real scripted episodes."""
    from piexp.env.splits import build_splits
    from piexp.launch.sandbox import run_sandbox
    from piexp.pretrain.build import RECIPE, _policy_draw, data_config, register_learner_tokenizer
    from piexp.pretrain.data import answer_turns, answer_windows, scripted_trajectories, token_sequences

    config = data_config()
    register_learner_tokenizer(RECIPE)
    by_family: dict[str, list[Any]] = {}
    for task in build_splits(config).train:
        by_family.setdefault(task.family, []).append(task)
    mix = [t for tasks in by_family.values() for t in tasks[:tasks_per_family]]
    copy = [t for tasks in by_family.values() for t in tasks[RECIPE.tasks_per_family :][:tasks_per_family]]
    policies = _policy_draw(RECIPE, [t.family for t in mix]) + ["oracle"] * len(copy)
    everything = mix + copy
    with run_sandbox(config.sandbox) as url:
        trajectories, rewards = asyncio.run(scripted_trajectories(config, url, everything, policies))
    families = [t.family for t in everything]
    sequences = token_sequences(trajectories, rewards, policies, families)
    whole = answer_turns(sequences[len(mix) :])
    return sequences[: len(mix)], whole, answer_windows(whole, RECIPE.copy_window)


def padded(chosen: list[Any]) -> tuple[Any, Any]:
    import torch

    width = max(len(c.tokens) for c in chosen)
    tokens = torch.zeros((len(chosen), width), dtype=torch.long)
    mask = torch.zeros((len(chosen), width), dtype=torch.bool)
    for row, c in enumerate(chosen):
        tokens[row, : len(c.tokens)] = torch.tensor(c.tokens)
        mask[row, : len(c.weights)] = torch.tensor(c.weights) > 0
    return tokens, mask


def main(argv: list[str]) -> int:
    import random

    import torch
    from rich.table import Table
    from transformers import AutoModelForCausalLM, Qwen3Config

    from piexp.pretrain.build import RECIPE
    from piexp.pretrain.training import hidden_at

    options = dict(arg.removeprefix("--").split("=", 1) for arg in argv)
    tasks, repeats = int(options.get("tasks", 40)), int(options.get("repeats", 10))
    from record import RecordingConsole, record

    console = RecordingConsole()
    console.print(f"rolling out {tasks} mix and {tasks} copy tasks per family ...")
    mix, whole, windows = episodes(tasks)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**RECIPE.model_config()), dtype=torch.float32)
    kinds = [
        ("mix episode", mix, 1, RECIPE.batch_sequences),
        ("whole answer turns", whole, RECIPE.whole_turn_batch_sequences, 1),
        ("answer windows", windows, RECIPE.late_copy_batch_sequences, 1),
    ]
    rng = random.Random(0)
    table = Table(title=f"fit: forward + backward seconds, median of {repeats} ({torch.get_num_threads()} threads)")
    for column in ("batch", "sequences", "tokens", "weighted", "whole model", "last layer at weighted only", "ratio"):
        table.add_column(column)
    late = {"whole": 0.0, "partial": 0.0}
    for name, pool, size, per_step in kinds:
        times: dict[str, list[float]] = {"whole": [], "partial": []}
        for _ in range(repeats + 2):
            tokens, mask = padded([pool[rng.randrange(len(pool))] for _ in range(size)])
            for way in ("whole", "partial"):
                model.zero_grad(set_to_none=True)
                started = time.perf_counter()
                states = (
                    model.model(input_ids=tokens).last_hidden_state[mask]
                    if way == "whole"
                    else hidden_at(model, tokens, mask)
                )
                states.sum().backward()
                times[way].append(time.perf_counter() - started)
        base, new = (statistics.median(times[way][2:]) for way in ("whole", "partial"))
        late["whole"] += per_step * base
        late["partial"] += per_step * new
        table.add_row(
            name,
            str(size),
            f"{int(tokens.numel())}",
            f"{int(mask.sum())}",
            f"{base:.3f}",
            f"{new:.3f}",
            f"{new / base:.2f}x",
        )
    table.add_row(
        "late step (these three)",
        "",
        "",
        "",
        f"{late['whole']:.3f}",
        f"{late['partial']:.3f}",
        f"{late['partial'] / late['whole']:.2f}x",
    )
    console.print(table)
    record(__file__, [table])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
