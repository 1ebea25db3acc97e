"""Every bench still runs against today's piexp: the ones that finish in seconds at their
smallest size run here for real (their records go to a scratch folder through
$PIEXP_BENCH_RESULTS, never to bench/results); the ones that train or start the local
model server (minutes, a JAX venv) are imported, so a name they use that piexp no longer
has fails here. mypy checks them all (tests/test_lint.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from piexp.harness.pi.install import find_install, locked_versions

BENCH = Path(__file__).resolve().parents[1] / "bench"
# bench file -> its smallest run's arguments
SMOKE_RUNS = {
    "tasks": ["--per-family", "1", "--sizes", "100,200"],
    "startup": ["--repeats", "1"],
    "namespace_cost": ["--runs", "2"],
    "sandbox": ["--runs", "2", "--concurrency", "1", "--span-runs", "0"],
    "sandbox_warm_probe": ["--runs", "2"],
    "rollouts": ["--episodes", "2", "--tasks", "1", "--families", "arith", "--paths", "eval"],
    "harness": ["--episodes", "1", "--concurrency", "1", "--slot-episodes", "2", "--node-starts", "1"],
    "pretrain_fit": ["--tasks=2", "--repeats=1"],
    "vocabulary": ["--sizes=2048"],
    "suite": ["--workers=1", "tests/test_project_words.py"],
    "ray_rollouts": ["--episodes", "2"],  # a one-node Ray cluster, both harnesses: about 25 s
    "forked_jobs": ["--pairs", "1"],
}
# Benches that train, or start the local model server, for minutes: imported only.
IMPORTED_ONLY = (
    "allocator",
    "discovery",
    "learning",
    "harness_transfer",
    "local_service",
    "sample_call",
    "training_controls",
    "untrained_lora",
)


def test_every_bench_is_smoke_run_or_imported() -> None:
    """A new bench gets a smoke run here (or is listed as imported only)."""
    sys.path.insert(0, str(BENCH))
    import report  # the benches' shared code, which is no bench: report.HELPERS

    benches = {path.stem for path in BENCH.glob("*.py")} - set(report.HELPERS)
    assert benches == set(SMOKE_RUNS) | set(IMPORTED_ONLY), benches ^ (set(SMOKE_RUNS) | set(IMPORTED_ONLY))


@pytest.mark.parametrize("name", sorted(SMOKE_RUNS))
def test_the_bench_runs_at_its_smallest_size(name: str, tmp_path: Path) -> None:
    """The bench runs to its end against today's piexp and records its figures (a bench
    that no longer runs is found here, not by the next person who needs its numbers)."""
    if name in ("harness", "ray_rollouts") and find_install(locked_versions()["pi"]) is None:
        pytest.skip("Pi is not installed in piexp's cache here (make setup installs it)")
    if name in ("sandbox_warm_probe", "namespace_cost") and os.geteuid() != 0:
        pytest.skip(f"bench/{name}.py needs root")
    env = {**os.environ, "PIEXP_BENCH_RESULTS": str(tmp_path), "PYTHONPATH": str(BENCH.parent)}
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *SMOKE_RUNS[name]],
        cwd=BENCH.parent, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / f"{name}.jsonl").is_file(), done.stderr[-2000:]


@pytest.mark.parametrize("name", IMPORTED_ONLY)
def test_the_bench_imports(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bench too slow to run here still imports: every name it takes from piexp exists."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
