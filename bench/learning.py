"""Does RL make `model=learner-local` better on held-out tasks, and does a control that
must not learn stay flat? One command, offline, on a CPU:

1. pre-training (the warm start: imitation of scripted episodes, piexp/pretrain; built
   once per machine, and its recorded build time is reported when it was cached);
2. `experiment=learn_offline` (the preset runs the loop): evaluate the base model on the
   eval split (tasks whose inputs never appear in training), train with RL, evaluate the
   trained checkpoint;
3. the control: the same run with `algo.shuffle_rewards=true` (each group's rewards
   permuted among its episodes before advantages), evaluated after training.

Usage: `python bench/learning.py [OUT_DIR] [--seeds=0,1,2,3,4] [--repeats=N]
[--harness=pi] [--with=OVERRIDE ...]` (`--harness=pi`: every stage in the real Pi, from
`model=learner-local-pi`, the base model pre-trained on episodes of both harnesses;
`--with` adds an override to the RL run and its control alike; a
temporary folder by default; the run folders stay in OUT_DIR, one `seed_S` folder per seed
when several and a `run_R` folder per repeat, for `piexp show` / `viewer.html`).

How to read it. Per run: pass@1 and mean shaped reward at each stage, and the paired
differences over eval tasks with 95% t-intervals (piexp.launch.comparison). A run holds
the claim when RL beats the base model beyond its interval and the control does not; the
verdict (and the exit status) is on pass@1, which does not saturate here, with mean shaped
reward's verdict beside it, and RL minus the control, paired over tasks. The per-step
tables give the training curve (reward, share of episodes that wrote a file, turns,
entropy, the sampler-trainer log-probability gap, the control's reward) and what each
step's episodes did (passed; printed the answer but stated another; a malformed tool
call; ran but printed something else; crashed; no program). With several seeds it counts
the runs that hold the claim; with repeats, how far runs of one seed spread (the local
server seeds sampling and the LoRA's initialisation from the run's seed, so what is left
is the last-bit rounding of a batch's gradient sums). Peak memory is the highest sum of
resident set sizes of the piexp process and its descendants (sandbox, SkyRL server),
sampled every 0.5 s. Bench runs of one seed vary by about 10% over a day on a shared
2-core machine: compare runs made back to back. The build, the RL settings and the time
of each stage are in the records (bench/results/learning.jsonl).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from record import RecordingConsole, record
from rich.console import Console
from rich.table import Table

LOOP = ["experiment=learn_offline"]  # the preset runs the loop: base eval, RL, trained eval
CONTROL = ["experiment=learn_offline", "mode.eval_before=false", "algo.shuffle_rewards=true"]


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def run_piexp(args: list[str], run_dir: Path, log: Path) -> tuple[float, float]:
    """One piexp command into `run_dir` (its output into `log`): wall seconds, peak MB."""
    from piexp.launch.child_processes import descendants

    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    started = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "piexp", *args, f"hydra.run.dir={run_dir}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        peak = [0.0]

        def sample() -> None:
            while process.poll() is None:
                peak[0] = max(peak[0], _rss_mb([process.pid, *descendants(process.pid)]))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        process.wait()
        sampler.join(2)
    if process.returncode != 0:
        raise SystemExit(f"piexp {' '.join(args)} failed (exit {process.returncode}); see {log}")
    return time.perf_counter() - started, peak[0]


#: Per harness: the overrides every stage runs with, and the piexp-built base model.
HARNESSES = {
    "builtin": ((), "learner-local"),
    # Pi's wall-time limit counts the time it waits for the model too: a CPU server
    # sampling a batch's episodes at once answers each far slower than a GPU would.
    "pi": (("harness=pi", "harness.options.wall_time_s=600", "model=learner-local-pi"), "learner-local-pi"),
}


def build_model(name: str = "learner-local") -> tuple[Path, dict, float, bool]:
    from piexp.launch.base_model import learner_rollouts
    from piexp.launch.sandbox import run_sandbox
    from piexp.pretrain.build import (
        LEARNER_RECIPES,
        data_config,
        ensure_learner_model,
        read_marker,
    )

    recipe = LEARNER_RECIPES[name]
    started, began = time.perf_counter(), time.time()
    sandbox = data_config(recipe).sandbox
    path = ensure_learner_model(lambda: run_sandbox(sandbox), recipe, learner_rollouts(recipe))
    # Cached when its weights predate this call: a model known here, or one found by the
    # tokens of episodes rolled out again for sources this machine had not seen (the
    # build's cost is then its recorded one, not this call's rollouts alone).
    cached = (path / "model.safetensors").stat().st_mtime < began
    return path, read_marker(path) or {}, time.perf_counter() - started, cached


#: Per-step training metrics the curve shows (metrics.jsonl keys, tinker-cookbook's and
#: piexp's reward metrics): a collapse shows as reward and turns falling while entropy
#: or the sampler-trainer gap jumps.
CURVE = (
    ("reward", "env/all/reward/total"),
    ("wrote", "env/all/mutation_succeeded"),
    ("turns", "env/all/turns_per_episode"),
    ("entropy", "optim/entropy"),
    ("kl(sampler,trainer)", "optim/kl_sample_train_v1"),
)


def curve(run_dir: Path) -> list[dict[str, float]]:
    """Each training step's CURVE metrics from the run's metrics.jsonl (missing: NaN)."""
    from piexp.run_folder import RunFolder

    rows = [row for row in RunFolder(run_dir).metrics() if "env/all/reward/total" in row]
    return [{name: float(row.get(key, float("nan"))) for name, key in CURVE} for row in rows]


#: What each training episode did, first match wins: the behaviour that grows shows a
#: collapse at a glance (parse errors, or episodes ending without writing a program).
OUTCOMES = (
    ("pass", lambda m, stop, calls: m.get("functional_correct")),
    ("answer wrong", lambda m, stop, calls: m.get("execution_output_correct")),  # the program printed it
    ("parse error", lambda m, stop, calls: stop == "parse_error"),
    ("ran, wrong", lambda m, stop, calls: m.get("execution_succeeded")),
    ("crashed", lambda m, stop, calls: m.get("mutation_succeeded")),
    ("no tool call", lambda m, stop, calls: calls == 0),
    ("no program", lambda m, stop, calls: True),
)


def outcomes(run_dir: Path) -> list[dict[str, int]]:
    """Each training step's episodes counted by OUTCOMES (train_transcripts.jsonl.gz)."""
    from piexp.transcripts.store import read_transcripts

    steps: dict[int, dict[str, int]] = {}
    for episode in read_transcripts(run_dir / "train_transcripts.jsonl.gz"):
        counts = steps.setdefault(int(episode.get("iteration") or 0), {name: 0 for name, _ in OUTCOMES})
        metrics, stop = episode.get("metrics") or {}, episode.get("stop_reason")
        calls = (episode.get("failures") or {}).get("calls")
        counts[next(name for name, matches in OUTCOMES if matches(metrics, stop, calls))] += 1
    return [steps[step] for step in sorted(steps)]


def learning(out: Path, console: Console, seed: int = 0, extra: tuple[str, ...] = (), harness: str = "builtin") -> dict:
    """Run every stage into `out` (the runs' seed: tasks, sampling, training order; `extra`
    overrides added to the RL run and its control alike; every stage in `harness`) and
    return the figures and verdicts."""
    from piexp.launch.comparison import compare, load_run
    from piexp.launch.loop import BASE_EVAL_DIR, TRAINED_EVAL_DIR

    began = time.perf_counter()
    overrides, model = HARNESSES[harness]
    extra = (*overrides, *extra)
    console.print(f"pre-training {model} (cached after the first build) ...")
    path, marker, build_s, cached = build_model(model)
    console.print(f"model {path} ({'cached' if cached else f'built in {build_s:.0f} s'})")
    console.print("RL run with evaluations before and after ...")
    loop_s, loop_mb = run_piexp([*LOOP, *extra, f"seed={seed}"], out / "rl", out / "rl.log")
    console.print("control run (shuffled rewards) ...")
    control_s, control_mb = run_piexp([*CONTROL, *extra, f"seed={seed}"], out / "control", out / "control.log")
    runs = [
        load_run(out / "rl" / BASE_EVAL_DIR),
        load_run(out / "rl" / TRAINED_EVAL_DIR),
        load_run(out / "control" / TRAINED_EVAL_DIR),
    ]
    result = compare(runs)["overall"]["runs"]
    base, rl, control = result
    # RL against the control directly, paired over the same tasks (printed beside the
    # verdict: how far apart the two trained models end).
    rl_vs_control = compare([runs[2], runs[1]])["overall"]["runs"][1]
    return {
        "seed": seed,
        "harness": harness,
        "model": model,
        "rl_curve": curve(out / "rl"),
        "rl_outcomes": outcomes(out / "rl"),
        "control_curve": curve(out / "control"),
        "build_s": marker.get("rollout_s", 0) + marker.get("fit_s", 0) if cached else build_s,
        "build_cached": cached,
        "heldout_nll": marker.get("heldout_nll"),
        "loop_s": loop_s,
        "control_s": control_s,
        "peak_mb": max(loop_mb, control_mb),
        "tasks": compare(runs)["overall"]["tasks"],
        "base": base,
        "rl": rl,
        "control": control,
        # The claim: held-out pass@1 rises beyond its interval, and does not under
        # shuffled rewards; mean shaped reward is reported beside it.
        "rl_improves": rl["diff_pass@1"] - rl["diff_pass@1_ci"] > 0,
        "control_flat": control["diff_pass@1"] - control["diff_pass@1_ci"] <= 0,
        "rl_improves_reward": rl["diff_reward"] - rl["diff_reward_ci"] > 0,
        "rl_vs_control": rl_vs_control,
        "rl_beats_control": rl_vs_control["diff_pass@1"] - rl_vs_control["diff_pass@1_ci"] > 0,
        "control_flat_reward": control["diff_reward"] - control["diff_reward_ci"] <= 0,
        "total_s": time.perf_counter() - began,
    }


def report(figures: dict, console: Console) -> None:
    table = Table(
        title=f"{figures.get('model', 'learner-local')} in harness {figures.get('harness', 'builtin')} on "
        f"{figures['tasks']} held-out eval tasks (pass@1, mean shaped reward, "
        "paired difference to the base model with its 95% t-interval over tasks)"
    )
    for column in ("stage", "pass@1", "reward", "diff pass@1", "diff reward"):
        table.add_column(column, justify="right" if column != "stage" else "left")
    for label, key in (
        ("base (pre-trained = warm-started)", "base"),
        ("after RL", "rl"),
        ("after RL, shuffled rewards (control)", "control"),
    ):
        row = figures[key]
        diff = (
            (
                f"{row['diff_pass@1']:+.3f} ± {row['diff_pass@1_ci']:.3f}",
                f"{row['diff_reward']:+.3f} ± {row['diff_reward_ci']:.3f}",
            )
            if "diff_pass@1" in row
            else ("", "")
        )
        table.add_row(label, f"{row['pass@1']:.3f}", f"{row['reward']:.3f}", *diff)
    console.print(table)
    steps = Table(title="training, per step: RL (and the control's reward)")
    for column in ("step", *(name for name, _ in CURVE), "control reward"):
        steps.add_column(column, justify="right")
    for step, row in enumerate(figures["rl_curve"]):
        control = figures["control_curve"][step]["reward"] if step < len(figures["control_curve"]) else float("nan")
        steps.add_row(str(step), *(f"{row[name]:.3f}" for name, _ in CURVE), f"{control:.3f}")
    console.print(steps)
    kinds = Table(title="RL training episodes per step, by what they did")
    for column in ("step", *(name for name, _ in OUTCOMES)):
        kinds.add_column(column, justify="right")
    for step, counts in enumerate(figures.get("rl_outcomes", [])):
        kinds.add_row(str(step), *(str(counts[name]) for name, _ in OUTCOMES))
    console.print(kinds)
    console.print(
        "a step's episodes: python -m piexp show OUT_DIR/rl --step N (OUT_DIR/seed_S/rl with several seeds; N, first or last; --html for the viewer)"
    )
    build = (
        f"{figures['build_s']:.0f} s (recorded at its build)"
        if figures["build_cached"]
        else f"{figures['build_s']:.0f} s"
    )
    console.print(
        f"pre-training {build}; RL run with both evaluations {figures['loop_s']:.0f} s; control "
        f"{figures['control_s']:.0f} s; whole bench {figures['total_s']:.0f} s; peak memory "
        f"{figures['peak_mb']:.0f} MB"
    )

    def word(flag: bool) -> str:
        return "yes" if flag else "NO"

    console.print(
        f"pass@1: RL beats the base model beyond its interval: {word(figures['rl_improves'])}; "
        f"the control does not: {word(figures['control_flat'])}"
    )
    versus = figures["rl_vs_control"]
    console.print(
        f"pass@1 after RL minus after the control, paired over tasks: {versus['diff_pass@1']:+.3f} ± "
        f"{versus['diff_pass@1_ci']:.3f}; beyond its interval: {word(figures['rl_beats_control'])}"
    )
    console.print(
        f"mean shaped reward: RL beats the base model beyond its interval: {word(figures['rl_improves_reward'])}; "
        f"the control does not: {word(figures['control_flat_reward'])}"
    )


def summary(runs: list[dict], console: Console) -> None:
    """One line per seed and the count of runs that hold the claim."""
    table = Table(title=f"{len(runs)} runs, one per seed (diff: paired difference to the base model, 95% interval)")
    for column in ("seed", "base pass@1", "RL diff pass@1", "control diff pass@1", "RL beyond", "control flat"):
        table.add_column(column, justify="right")
    for run in runs:
        rl, control = run["rl"], run["control"]
        table.add_row(
            str(run["seed"]),
            f"{run['base']['pass@1']:.3f}",
            f"{rl['diff_pass@1']:+.3f} ± {rl['diff_pass@1_ci']:.3f}",
            f"{control['diff_pass@1']:+.3f} ± {control['diff_pass@1_ci']:.3f}",
            "yes" if run["rl_improves"] else "NO",
            "yes" if run["control_flat"] else "NO",
        )
    console.print(table)
    held = sum(run["rl_improves"] and run["control_flat"] for run in runs)
    console.print(f"RL beyond its interval with the control flat in {held} of {len(runs)} runs")


def spread(runs: list[dict], console: Console) -> None:
    """Per seed run more than once: how far repeated runs of the same command move the
    figures (the part of the result that is not deterministic)."""
    import statistics

    table = Table(title="repeated runs of one seed: the spread that is not deterministic (min, max, sd)")
    for column in ("seed", "runs", "base pass@1", "after RL pass@1", "RL diff pass@1", "control diff pass@1"):
        table.add_column(column, justify="right")
    for seed in dict.fromkeys(run["seed"] for run in runs):
        same = [run for run in runs if run["seed"] == seed]
        if len(same) < 2:
            continue

        def cell(values: list[float]) -> str:
            return f"{min(values):.3f}-{max(values):.3f} (sd {statistics.stdev(values):.3f})"

        table.add_row(
            str(seed),
            str(len(same)),
            cell([run["base"]["pass@1"] for run in same]),
            cell([run["rl"]["pass@1"] for run in same]),
            cell([run["rl"]["diff_pass@1"] for run in same]),
            cell([run["control"]["diff_pass@1"] for run in same]),
        )
    console.print(table)


def main() -> int:
    """`python bench/learning.py [OUT_DIR] [--seeds=0,1,2,3,4] [--repeats=N] [--with=OVERRIDE ...]`:
    N runs per seed, each override added to the RL run and its control."""
    args = [a for a in sys.argv[1:] if not a.startswith(("--seeds", "--repeats", "--with=", "--harness="))]
    harness = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--harness=")), "builtin")
    if harness not in HARNESSES:
        raise SystemExit(f"--harness={harness}: the bench runs in {', '.join(HARNESSES)}")
    extra = tuple(a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--with="))
    seeds_arg = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--seeds=")), "0")
    repeats = int(next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--repeats=")), "1"))
    seeds = [int(s) for s in seeds_arg.split(",")]
    console = RecordingConsole()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args[0]) if args else Path(tmp)
        for seed in seeds:
            for repeat in range(repeats):
                folder = out if len(seeds) == 1 else out / f"seed_{seed}"
                folder = folder / f"run_{repeat}" if repeats > 1 else folder
                folder.mkdir(parents=True, exist_ok=True)
                figures = learning(folder, console, seed, extra, harness)
                report(figures, console)
                runs.append(figures)
    if len(runs) > 1:
        summary(runs, console)
    if repeats > 1:
        spread(runs, console)
    record(__file__, console.tables, console.lines)
    return 0 if all(run["rl_improves"] and run["control_flat"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
