"""What the local server's prefix cache (`service.prefix_cache`, piexp/service/compat/ item
12) saves, against the same command without it, run by turns in fresh servers:

* `eval` (default): `python -m piexp experiment=learn_offline mode=eval policy=model`,
  the base learner-local evaluated on the preset's eval split (128 episodes of 2-4 turns);
* `learn`: `python -m piexp experiment=learn_offline seed=0`, the whole loop (base eval,
  8 RL steps, the trained checkpoint's eval).

For each run it prints the wall time, the CPU time of piexp and everything it started,
the seconds the engine spent in sample calls (its log's `process_batch_requests(sample)`
timings), and with the cache the prompt tokens it continued from kept prefixes against
those it prefilled; then whether the two ways gave the same episodes (shaped reward,
answer and turns of each) and the same pass@1. They need not: a continued prefill
rounds its last bits differently from a full one, and a draw that falls on a boundary
between two tokens can go the other way.

Usage: `python bench/prefix_cache.py [eval|learn] [--rounds=2] [OUT_DIR]` (builds
learner-local first if this machine has none; the compilation cache is shared, so run it
once to compile both ways' programs before reading its times).

Measured 2026-12-04 on the 2-core machine, nothing else running (learner-local
ea87251d197d73b7; the first run with the cache compiled its programs):

| command | with the cache, s (CPU s) | without, s (CPU s) | best of 2: wall, CPU, engine sample | prompt tokens kept / prefilled | pass@1 |
| --- | --- | --- | --- | --- | --- |
| eval | 57.9 (83.7), 44.8 (62.0) | 52.1 (77.7), 50.7 (76.4) | 0.88x, 0.81x, 0.79x | 384,380 / 100,803 | 0.070 both ways |
| learn | 292.0 (444.9), 261.1 (401.2) | 258.3 (408.0), 278.7 (444.6) | 1.01x, 0.98x, 0.99x | (counted wrongly then) | 0.070 -> 0.672 both ways; 239 of 256 episodes the same |

Hence off by default. An eval's prompts are mostly kept (78% of its prompt tokens), but
most of a sample call's time is decode, not prefill: a batch decodes until its longest
turn ends (a `write` of a whole program runs to hundreds of tokens), each step reading
the whole padded KV cache (0.5 ms a step at 8 x 768 positions, 0.95 ms at 8 x 2,048,
2.6 ms at 8 x 3,584). In the RL loop every weight update drops what was kept, so each
step's first turns prefill in full, and a batch that holds one of them (or a tool result
longer than 256 tokens) prefills in full too. A first version that padded continued
prefills to powers of two (64 to 1,024 new tokens) and widened the KV cache to fit
compiled 9-15 new programs in each of three runs in a row (3-5 s each), and gained
nothing measurable either.

Twentieth session (2026-12-04, the same machine on a faster day): "most of a sample call's
time is decode" does not hold at the loop's shapes. bench/sample_call.py measures a
prompt's prefill at two thirds of a call of 8 rows at padded prompts of 1,024-2,048. Yet
in an RL run the cache continued 637 of 1,095 prompts, keeping 60% of their tokens (by its
log), and in `experiment=learn_offline` runs back to back with the compilation cache
filled, the engine's sample calls took 69.6 s and 69.2 s with it against 62.0 s without
(training 77.5 s and 75.6 s against 69.3 s). A continued call by itself does save: in
skyrl's backend in one process (a probe, not this bench), 8 second turns of 150 new
tokens after first turns of 1,000 and 1,500 tokens, 200 tokens sampled, took 0.23 s and
0.31 s continued against 0.31 s and 0.455 s in full (0.75x and 0.69x). In the loop, pairing
each call's `(prefix cache)` line with its timing (the second warm run with it): its 67
calls whose every row continued took 25.0 s for 478 rows (52 ms a row), its 56 calls
that prefilled every row 35.3 s for 459 rows (77 ms a row), its 13 scoring calls 8.9 s
for 128; the run without it took 62.0 s for the same 1,065 rows, about 57 ms a sampled
row. So with the cache on, every call costs more than the prefill it saves (the kept
keys and values it returns and stores are the first suspect), not yet measured apart.

Twenty-first session (the same day, from the twentieth session's server logs): in the warm
train stage with the cache, 9 sample calls that carry a `(prefix cache)` line took over 1
s, 15.1 s in all (2 of them logged as skyrl's first call at a length, `JIT compiling for
sample`; the others, of batch sizes and continued or full shapes, most likely the first
call of one of the cache's own programs in that process, not checked call by call), and 4
scoring batches (run one sequence at a time) 4.7 s, as 6 such batches took 6.8 s without
the cache. Without all those calls the rest took 49.8 s against 55.2 s without the cache
(0.90x): the calls themselves save, and the cache's extra programs, which each stage's
fresh server process traces and loads again, take it back. A probe in one process: the
first call of one of the cache's programs 0.4-0.8 s with the compilation cache filled and
1.8-2.5 s when it compiles. Since then the engine's causal attention skips blocks of
padding (compat item 6, bench/sample_call.py), which makes a full prefill cheaper and the
cache's saving smaller; the figures above are from before that change.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

COMMANDS = {
    "eval": ["experiment=learn_offline", "mode=eval", "policy=model"],
    "learn": ["experiment=learn_offline", "seed=0"],
}
SAMPLE_CALL = re.compile(r"process_batch_requests\(sample,\s*n=\d+\)\s+took\s+([\d.]+)s")
KEPT = re.compile(r"\(prefix cache\) \d+ of \d+ prompts continued,\s+(\d+) tokens kept, (\d+) prefilled")


def _server_figures(run_dir: Path) -> dict[str, float]:
    sample_s = kept = prefilled = 0.0
    for log in sorted(run_dir.rglob("server.log")):
        text = re.sub(r"\s*\n(?!\d{4}-)", " ", log.read_text(errors="replace"))  # rich wraps long lines
        sample_s += sum(float(m) for m in SAMPLE_CALL.findall(text))
        for k, p in KEPT.findall(text):
            kept, prefilled = kept + int(k), prefilled + int(p)
    return {"sample_s": sample_s, "kept": kept, "prefilled": prefilled}


def _episodes(run_dir: Path) -> dict[tuple[str, str, int], tuple]:
    episodes = {}
    for path in sorted(run_dir.rglob("episodes.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            key = (str(path.parent.relative_to(run_dir)), record["task_id"], record.get("sample", 0))
            episodes[key] = (record.get("shaped"), record.get("answer"), record.get("turns"))
    return episodes


def _pass_at_1(run_dir: Path) -> list[float]:
    figures = []
    for path in sorted(run_dir.rglob("results.json")):
        figures.append(round(float(json.loads(path.read_text())["overall"]["pass@1"]), 4))
    return figures


def run(args: list[str], run_dir: Path, cached: bool) -> dict:
    log = run_dir.with_suffix(".log")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "piexp", *args, f"service.prefix_cache={str(cached).lower()}",
             f"hydra.run.dir={run_dir}"],
            stdout=out, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"piexp {' '.join(args)} failed (exit {done.returncode}); see {log}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": wall, "cpu_s": cpu, **_server_figures(run_dir), "episodes": _episodes(run_dir),
        "pass_at_1": _pass_at_1(run_dir),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    console = Console()
    what = next((a for a in argv if a in COMMANDS), "eval")
    rounds = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--rounds=")), 2)
    out_arg = next((a for a in argv if not a.startswith("--") and a not in COMMANDS), None)
    out = Path(out_arg) if out_arg else Path(tempfile.mkdtemp(prefix="piexp-prefix-cache-"))
    out.mkdir(parents=True, exist_ok=True)
    from piexp.launch.sandbox import run_sandbox
    from piexp.pretrain.build import data_config, ensure_learner_model

    ensure_learner_model(lambda: run_sandbox(data_config().sandbox))
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for index in range(rounds):
        for cached in (True, False) if index % 2 == 0 else (False, True):
            name = f"{what}_{'cache' if cached else 'full'}_{index}"
            console.print(f"{name} ...")
            runs[cached].append(run(COMMANDS[what], out / name, cached))
    table = Table(title=f"prefix cache: {what} ({out})")
    for column in ("run", "wall s", "CPU s", "engine sample s", "prompt tokens kept / prefilled", "pass@1"):
        table.add_column(column)
    for cached in (True, False):
        for index, figures in enumerate(runs[cached]):
            tokens = f"{figures['kept']:,.0f} / {figures['prefilled']:,.0f}" if cached else "- / all"
            table.add_row(
                f"{'cache' if cached else 'full'} {index}", f"{figures['wall_s']:.1f}", f"{figures['cpu_s']:.1f}",
                f"{figures['sample_s']:.1f}", tokens, ", ".join(f"{p:.3f}" for p in figures["pass_at_1"]),
            )  # fmt: skip
    console.print(table)

    def best(cached: bool, key: str) -> float:
        return min(figures[key] for figures in runs[cached])

    for key, label in (("wall_s", "wall"), ("cpu_s", "CPU"), ("sample_s", "engine sample")):
        console.print(f"{label}: {best(True, key) / best(False, key):.2f}x with the cache (best of {rounds} each)")
    cache_episodes, full_episodes = runs[True][0]["episodes"], runs[False][0]["episodes"]
    same = sum(cache_episodes.get(key) == value for key, value in full_episodes.items())
    console.print(
        f"same episodes (shaped reward, answer, turns): {same} of {len(full_episodes)}; "
        f"pass@1 {runs[True][0]['pass_at_1']} with the cache, {runs[False][0]['pass_at_1']} without"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
