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

How to read it: the ratios are the best of `--rounds` runs with the cache over the best
without; below 1.00x it saves. In the RL loop every weight update drops what was kept, so
each step's first turns prefill in full, and a batch that holds one of them (or a tool
result longer than 256 tokens) prefills in full too; each stage's fresh server process
also traces and loads the cache's own programs again. The cache is off by default.
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

from record import RecordingConsole, record
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
    console = RecordingConsole()
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
    record(__file__, console.tables, console.lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
