"""Sandbox throughput and latency vs bare spawn.

For a small Python and a small JavaScript program, at concurrency 1, 4 and 8: runs per
second and p50/p99 latency through the embedded server (HTTP + bubblewrap + limits),
and the same program spawned bare with `subprocess` (no isolation, no HTTP) as the
baseline; the CPU time the whole machine spent per run in each arm (server, client,
bwrap and kernel workers included: at concurrency 4 and 8 the CPUs are saturated, so the
ratio is about bare CPU / sandbox CPU); then the ratio sandbox/bare of runs per second.
Then, per language, where a
sandboxed run's time goes at concurrency 1: the median of each step the server reports
in its `Server-Timing` header (parse, queue, cgroup, spawn, bwrap, confine, files, run,
drain, fetch, cleanup, respond) and what is left for HTTP and the client.

    python bench/sandbox.py [--runs 40] [--concurrency 1 4 8] [--span-runs 30] [--launcher zygote|bwrap]
                            [--prespawn N] [--interleave] [--before REF]

`--interleave` alternates batches of bare and sandboxed runs within each cell instead of
running all bare runs first: on a shared, loaded host the load drifts between the two
halves of a cell, which alone can swing the ratio by 2x.
`--before REF` adds a third arm: the same requests through a server of commit REF of this
repository (checked out into a temporary git worktree), so that a change's cost shows as
"before" and "after" ratios measured in the same run.
`--launcher` picks how the server starts an isolated run (SandboxSettings.launcher): the
zygote (default; one process holds the sandbox root, a run costs fresh namespaces only)
or a bwrap per run. `--prespawn N` (bwrap only) runs the server with N sandboxes per
language started ahead of requests (same isolation, see SandboxSettings.prespawn).

How to read it: once the CPUs are saturated (concurrency 4 and 8 on 2 cores) the ratio is
about bare CPU / sandbox CPU, so what counts is the CPU a run costs beyond a bare spawn:
an HTTP round trip (aiohttp server + httpx client), the runner's own work and the
isolation floor printed below the table (what isolating `/bin/true` costs before any
server, HTTP or client work). The per-step table says which of those steps to look at
when a ratio falls.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import httpx
from record import RecordingConsole, record
from rich.console import Console
from rich.table import Table

from machine_cpu import busy_cpu_ms, command_cost
from piexp.sandbox import EmbeddedSandbox, close_sandbox_clients, sandbox_client
from piexp.sandbox.settings import LAUNCHERS
from piexp.sandbox.isolation.layout import resolve_runtime, root_layout
from piexp.sandbox.launchers.bwrap import build_bwrap_argv
from piexp.sandbox.launchers.zygote_client import Zygote, ZygoteError

PROGRAMS = {
    "python": (
        "python3",
        "main.py",
        "import sys\nn = int(open('n.txt').read())\nprint(sum(i * i for i in range(n)))\n",
    ),
    "javascript": (
        "node",
        "main.js",
        "const n = parseInt(require('fs').readFileSync('n.txt', 'utf8'));\n"
        "let s = 0; for (let i = 0; i < n; i++) s += i * i; console.log(s);\n",
    ),
}
FILES = {"n.txt": "1000"}


async def _measured(coro) -> tuple[float, list[float], float]:
    """(elapsed s, latencies, machine CPU ms spent) of one batch."""
    cpu0 = busy_cpu_ms()
    elapsed, latencies = await coro
    return elapsed, latencies, busy_cpu_ms() - cpu0


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[k]


async def _drive(n_runs: int, concurrency: int, one) -> tuple[float, list[float]]:
    latencies: list[float] = []
    queue = iter(range(n_runs))

    async def worker():
        for _ in queue:
            t0 = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return time.perf_counter() - t0, latencies


async def bench_bare(lang: str, n_runs: int, concurrency: int) -> tuple[float, list[float]]:
    binary, fname, code = PROGRAMS[lang]
    # Same interpreter the sandbox runs (a pyenv shim would add ~40 ms of bash per run)
    # and the same small environment: this host's NODE_EXTRA_CA_CERTS alone costs node
    # ~120 ms per start, which would flatter the sandbox, which clears the environment.
    runtime = resolve_runtime(binary)
    assert runtime is not None, f"{binary} is not installed"
    exe = runtime.binary
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}

    async def one():
        d = tempfile.mkdtemp(prefix="bench-bare-")
        try:
            for k, v in {**FILES, fname: code}.items():
                with open(os.path.join(d, k), "w") as f:
                    f.write(v)
            # Its own session, like every sandboxed run (bwrap is started as a session
            # leader): with the kernel's scheduler autogroups (sched_autogroup_enabled=1,
            # this host) each session is one scheduling group, so bare runs sharing the
            # bench's session would get one group's CPU share between them while each
            # sandboxed run gets its own, flattering the sandbox under load.
            proc = await asyncio.create_subprocess_exec(
                exe,
                fname,
                cwd=d,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
            out, _ = await proc.communicate()
            assert proc.returncode == 0 and out.strip() == b"332833500", out
        finally:
            shutil.rmtree(d)

    return await _drive(n_runs, concurrency, one)


async def bench_sandbox(url: str, lang: str, n_runs: int, concurrency: int) -> tuple[float, list[float]]:
    _, _, code = PROGRAMS[lang]
    client = sandbox_client(url, max_concurrency=max(8, concurrency))

    async def one():
        ok, resp = await client.run(code=code, files=FILES, timeout=30, language=lang)
        assert ok and resp["status"] == "Success", resp
        assert resp["run_result"]["stdout"].strip() == "332833500"

    return await _drive(n_runs, concurrency, one)


# Run by the "before" server's process, with that commit's piexp first on sys.path.
_SERVE_AT_REF = """
import sys
from piexp.sandbox import EmbeddedSandbox
with EmbeddedSandbox(max_concurrency=int(sys.argv[1]), launcher=sys.argv[2], work_dir=sys.argv[3]) as sb:
    print(sb.url, flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def server_at_ref(ref: str, max_concurrency: int, launcher: str):
    """The URL of an embedded sandbox server of commit `ref`, from a temporary worktree."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tree = tempfile.mkdtemp(prefix="bench-before-")
    # A work dir of its own: an older zygote binds its runs' parent without its submounts,
    # which a user namespace refuses while the current server's run area is mounted there.
    work_dir = tempfile.mkdtemp(prefix="bench-before-runs-")
    os.chmod(work_dir, 0o755)
    subprocess.run(["git", "-C", repo, "worktree", "add", "--detach", "-f", tree, ref], check=True, capture_output=True)
    proc = None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE_AT_REF, str(max_concurrency), launcher, work_dir],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": tree},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the server of {ref} did not start (exit {proc.wait()})")
        yield url
    finally:
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            proc.wait(timeout=30)
        subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", tree], capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(work_dir, ignore_errors=True)


async def main_async(args) -> None:
    console = RecordingConsole(width=max(150, Console().width))
    table = Table(
        title=f"sandbox vs bare spawn ({os.cpu_count()} CPUs, {args.runs} runs per cell, "
        f"launcher={args.launcher}, prespawn={args.prespawn}, {'interleaved, ' if args.interleave else ''}"
        f"load avg {os.getloadavg()[0]:.1f})"
    )
    arm_names = ["bare", "sandbox", *(["before"] if args.before else [])]
    table.add_column("language")
    table.add_column("conc", justify="right")
    for arm in arm_names:
        for col in ("runs/s", "p50 ms", "p99 ms", "cpu ms/run"):
            table.add_column(f"{arm} {col}", justify="right")
    for arm in arm_names[1:]:
        table.add_column(f"ratio {arm}/bare", justify="right")
    with contextlib.ExitStack() as stack:
        sb = stack.enter_context(
            EmbeddedSandbox(max_concurrency=max(args.concurrency), prespawn=args.prespawn, launcher=args.launcher)
        )
        urls = {"sandbox": sb.url}
        if args.before:
            urls["before"] = stack.enter_context(server_at_ref(args.before, max(args.concurrency), args.launcher))

        def batch(arm: str, lang: str, n: int, c: int):
            return bench_bare(lang, n, c) if arm == "bare" else bench_sandbox(urls[arm], lang, n, c)

        for lang in PROGRAMS:
            for arm in arm_names:  # warm-up: page cache, the servers' runtime resolution
                await batch(arm, lang, 2, 1)
            for c in args.concurrency:
                elapsed = {arm: 0.0 for arm in arm_names}
                cpu = {arm: 0.0 for arm in arm_names}
                lat: dict[str, list[float]] = {arm: [] for arm in arm_names}
                if args.interleave:
                    # Alternate small batches of the arms (order rotated each round) so
                    # load drift from other work on the host hits them alike.
                    rounds = max(1, args.runs // (2 * c))
                    plan = [
                        (r, arm_names[r % len(arm_names) :] + arm_names[: r % len(arm_names)], 2 * c)
                        for r in range(rounds)
                    ]
                    n = rounds * 2 * c
                else:
                    plan = [(0, arm_names, args.runs)]
                    n = args.runs
                for _, order, size in plan:
                    for arm in order:
                        dt, ls, cp = await _measured(batch(arm, lang, size, c))
                        elapsed[arm] += dt
                        lat[arm] += ls
                        cpu[arm] += cp
                rps = {arm: n / elapsed[arm] for arm in arm_names}
                cells = [lang, str(c)]
                for arm in arm_names:
                    cells += [
                        f"{rps[arm]:.1f}",
                        f"{statistics.median(lat[arm]) * 1e3:.1f}",
                        f"{percentile(lat[arm], 0.99) * 1e3:.1f}",
                        f"{cpu[arm] / n:.1f}",
                    ]
                cells += [f"{rps[arm] / rps['bare']:.2f}" for arm in arm_names[1:]]
                table.add_row(*cells)
        spans = {lang: await bench_spans(sb.url, lang, args.span_runs) for lang in PROGRAMS} if args.span_runs else {}
        await close_sandbox_clients()
    console.print(table)
    floor = isolation_floor_cpu_ms()
    console.print(
        f"isolation floor: /bin/true costs {floor['bare']:.1f} ms of CPU bare, {floor['bwrap']:.1f} ms inside bwrap "
        f"with the sandbox's command line (+{floor['bwrap'] - floor['bare']:.1f}) and {floor['zygote']:.1f} ms "
        f"started by the zygote (+{floor['zygote'] - floor['bare']:.1f}): what isolating a run costs before any "
        "server, HTTP or client work. With the CPUs saturated (concurrency >= CPUs) the ratio cannot exceed "
        "bare cpu / (bare cpu + that floor + the server's and client's CPU per run)."
    )
    if spans:
        steps = list(dict.fromkeys(k for per_lang in spans.values() for k in per_lang))
        st = Table(title=f"where a sandboxed run's time goes, concurrency 1 (median ms of {args.span_runs} runs)")
        st.add_column("step")
        for lang in spans:
            st.add_column(lang, justify="right")
        for step in steps:
            st.add_row(
                step, *[f"{statistics.median(spans[lang][step]):.2f}" if step in spans[lang] else "" for lang in spans]
            )
        console.print(st)
    record(__file__, console.tables, console.lines)


def isolation_floor_cpu_ms(n_runs: int = 100) -> dict[str, float]:
    """Machine CPU ms per start of `/bin/true`, one after another: bare, inside bwrap with
    the sandbox's full command line, and through the zygote (namespaces, mounts and
    teardown included): what per-run isolation costs before any server, HTTP or client
    work. nan where bwrap, a runtime or the zygote is unavailable."""
    nan = float("nan")
    out = {"bare": command_cost(["/bin/true"], n_runs)[0], "bwrap": nan, "zygote": nan}
    runtime = resolve_runtime("python3")
    bwrap = shutil.which("bwrap")
    if runtime is None or bwrap is None:
        return out
    runs_dir = tempfile.mkdtemp(prefix="bench-floor-")
    run_dir = os.path.join(runs_dir, "run")
    os.mkdir(run_dir, 0o755)
    try:
        out["bwrap"] = command_cost(build_bwrap_argv(bwrap, run_dir, ["/bin/true"], runtime, 16), n_runs)[0]
        try:
            zygote = Zygote.start(runs_dir, root_layout([runtime]))
        except ZygoteError as exc:
            print(f"(zygote unavailable: {exc})")
            return out
        null = os.open(os.devnull, os.O_RDWR)
        try:

            def one() -> None:
                code, why = zygote.run_blocking("run", ["/bin/true"], [null, null, null])
                if code != 0:
                    raise RuntimeError(f"/bin/true failed through the zygote (exit {code}): {why}")

            one()
            time.sleep(0.3)
            cpu0 = busy_cpu_ms()
            for _ in range(n_runs):
                one()
            time.sleep(0.3)  # deferred namespace teardown lands in the count
            out["zygote"] = (busy_cpu_ms() - cpu0) / n_runs
        finally:
            os.close(null)
            zygote.close()
        return out
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)


async def bench_spans(url: str, lang: str, n_runs: int) -> dict[str, list[float]]:
    """Per-step server spans (from `Server-Timing`) plus the client-side rest."""
    _, _, code = PROGRAMS[lang]
    import base64

    payload = {
        "code": code,
        "language": "nodejs" if lang == "javascript" else lang,
        "run_timeout": 30,
        "files": {k: base64.b64encode(v.encode()).decode() for k, v in FILES.items()},
    }
    out: dict[str, list[float]] = {}
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
        for i in range(n_runs + 2):
            t0 = time.perf_counter()
            r = await http.post(url, json=payload)
            total = (time.perf_counter() - t0) * 1e3
            assert r.status_code == 200 and r.json()["status"] == "Success", r.text
            if i < 2:  # warm-up
                continue
            server = 0.0
            for part in r.headers.get("server-timing", "").split(","):
                name, _, dur = part.strip().partition(";dur=")
                if name:
                    out.setdefault(name, []).append(float(dur))
                    server += float(dur)
            out.setdefault("http+client", []).append(total - server)
            out.setdefault("total (client)", []).append(total)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument(
        "--interleave",
        action="store_true",
        help="alternate bare and sandbox batches within each cell (robust to load drift on a shared host)",
    )
    p.add_argument("--launcher", choices=LAUNCHERS, default="zygote", help="how the server starts isolated runs")
    p.add_argument("--prespawn", type=int, default=0, help="server's sandboxes pre-started per language (bwrap only)")
    p.add_argument("--span-runs", type=int, default=30, help="runs per language for the per-step table (0: skip)")
    p.add_argument(
        "--before",
        metavar="REF",
        default=None,
        help="also measure a server of this git commit (e.g. main~1), in the same run",
    )
    args = p.parse_args()
    if args.prespawn and args.launcher != "bwrap":
        p.error("--prespawn needs --launcher bwrap (the zygote pre-starts nothing)")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
