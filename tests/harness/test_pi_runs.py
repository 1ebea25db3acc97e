"""`harness=pi` on the command line: `mode=check` passes through the real Pi, an eval
records Pi's and node's versions in the manifest and its episodes for `show`, and bad
input (an unknown harness, a Pi that is not installed) is one paragraph, exit 2, with
nothing written."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

from piexp.harness.pi.harness import PiHarness
from piexp.run_folder import RunFolder
from tests.harness.conftest import requires_pi
from tests.job_launcher import run_piexp

ROOT = Path(__file__).resolve().parents[2]


def piexp(*args: str, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return run_piexp(*args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=timeout)


@requires_pi
def test_check_passes_through_pi_and_the_run_records_pi(tmp_path):
    """Two families x Python and JavaScript, one oracle task per cell and split (24 Pi
    episodes: 22 s on this 2-core machine idle, up to 63 s while other suites run), then
    replayed (as long again)."""
    run_dir = tmp_path / "check"
    done = piexp("mode=check", "harness=pi", "family=arith,csv_agg", "lang=python,javascript",
                 "mode.oracle_tasks_per_cell=1", f"hydra.run.dir={run_dir}")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((run_dir / "check.json").read_text())
    assert report["passed"] and report["oracle_pass_rate"] == 1.0
    assert {(e["policy"], e["language"]) for e in report["episodes"]} >= {
        (p, lang) for p in ("oracle", "guess", "crash", "wrong", "edit") for lang in ("python", "javascript")
    }
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["harness"]["name"] == "pi"
    assert manifest["harness"]["pi_version"] == "1.6.0" and manifest["harness"]["node_version"].startswith("22.")
    shown = piexp("show", str(run_dir), "0")
    assert shown.returncode == 0, shown.stderr
    assert "Use python to complete this workspace task" in shown.stdout
    # rescore regrades the steps graded from Pi's trace under other reward settings (no
    # sampling): the run's own settings reproduce every recorded reward, and the policies
    # that earn partial credit earn it under the new weights.
    rescored = piexp("rescore", str(run_dir), "reward.weights.output=0.6", "--out", str(tmp_path / "rs"), "--json",
                     timeout=300)  # fmt: skip
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    report = json.loads(rescored.stdout)
    assert report["reproduced"] == report["episodes"] == len(json.loads((run_dir / "check.json").read_text())[
        "episodes"]) and not report["differ"]  # fmt: skip
    (setting,) = report["settings"]
    assert setting["label"] == "reward.weights.output=0.6" and 0 < setting["mean"] < 1
    # replay plays every recorded episode (each scripted policy's) again through today's Pi.
    replayed = piexp("replay", str(run_dir), "--out", str(tmp_path / "replay"), timeout=600)
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    report = json.loads((tmp_path / "replay" / "replay.json").read_text())
    assert (
        report["episodes"] == report["identical"] == len(json.loads((run_dir / "check.json").read_text())["episodes"])
    )
    # A recording whose program printed something else than today's Pi and sandbox give
    # (its bash result changed) is found, as a tool result.
    with gzip.open(run_dir / RunFolder.CHECK_TRANSCRIPTS, "rt") as f:
        transcripts = [json.loads(line) for line in f]
    oracle = next(t for t in transcripts if t["policy"] == "oracle")
    conversation = oracle["conversation"]
    ran = next(i for i, m in enumerate(conversation) if any(c["name"] == "bash" for c in m.get("tool_calls") or []))
    conversation[ran + 1].pop("result", None)  # a tool result's JSON text is shown parsed
    conversation[ran + 1]["text"] = "12345"
    with gzip.open(run_dir / RunFolder.CHECK_TRANSCRIPTS, "wt") as f:
        f.writelines(json.dumps(t) + "\n" for t in transcripts)
    changed = piexp("replay", str(run_dir), "--policy", "oracle", "--out", str(tmp_path / "changed"), timeout=600)
    assert changed.returncode == 1, changed.stderr[-2000:]
    report = json.loads((tmp_path / "changed" / "replay.json").read_text())
    different = [e for e in report["outcomes"] if not e["identical"]]
    assert len(different) == 1 and different[0]["difference"]["kind"] == "tool result"
    # A rerun with another Pi than the run's is refused by name, before anything runs.
    manifest["harness"]["pi_version"] = "1.5.0"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    again = piexp("reproduce", str(run_dir), timeout=300)
    assert again.returncode == 2, again.stderr[-2000:]
    assert "pi 1.5.0" in again.stderr and "this piexp has 1.6.0" in again.stderr and "Traceback" not in again.stderr


def test_an_unknown_harness_is_refused_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    done = piexp("mode=check", "harness=codex", f"hydra.run.dir={run_dir}", timeout=120)
    assert done.returncode == 2
    assert "harness" in done.stderr and "Traceback" not in done.stderr
    assert not run_dir.exists()


@requires_pi
def test_a_concurrency_that_would_exhaust_memory_is_refused_before_anything_is_written(tmp_path):
    """A Pi episode holds about 110 MB: 100,000 at once would need terabytes."""
    run_dir = tmp_path / "run"
    done = piexp("mode=eval", "harness=pi", "policy=oracle", "family=arith", "mode.max_concurrency=100000",
                 f"hydra.run.dir={run_dir}", timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "would hold about" in done.stderr and "Set mode.max_concurrency=" in done.stderr
    assert "Traceback" not in done.stderr and not run_dir.exists()


def test_pi_not_installed_names_make_setup_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    done = piexp("mode=check", "harness=pi", f"hydra.run.dir={run_dir}",
                 env={"PIEXP_CACHE_DIR": str(tmp_path / "empty-cache")}, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())  # the paragraph is wrapped to the terminal's width
    assert "make setup" in said and "not installed" in said and "Traceback" not in said
    assert not run_dir.exists()


def test_another_pi_version_is_refused_by_name(tmp_path):
    run_dir = tmp_path / "run"
    done = piexp("mode=check", "harness=pi", "harness.options.version=1.7.0", f"hydra.run.dir={run_dir}", timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Pi 1.7.0" in done.stderr and "pins Pi 1.6.0" in done.stderr and "Traceback" not in done.stderr
    assert not run_dir.exists()


@requires_pi
def test_evals_through_pi_give_the_reference_pass_rates_and_compare_with_builtin(tmp_path):
    """oracle 1.000 and wrong 0.000 through Pi, and `compare` of a builtin and a Pi eval
    of the oracle on the same tasks; every place a result is shown names the harness that
    played it, with Pi's version; the wrong policy's Pi eval replays and rescores with no
    difference (three eval runs, a comparison, a replay and a rescore: about 60 s on this
    2-core machine idle, more while other suites run: each run starts its own sandbox server)."""
    common = ["mode=eval", "family=arith", "lang=python,javascript", "tasks.eval_per_family=2", "mode.preflight=false"]
    runs = {}
    for harness, policy in (("pi", "oracle"), ("pi", "wrong"), ("builtin", "oracle")):
        run_dir = runs[harness, policy] = tmp_path / f"{harness}-{policy}"
        logged = ["mode.wandb_project=piexp-test"] if (harness, policy) == ("pi", "oracle") else []
        done = piexp(*common, f"harness={harness}", f"policy={policy}", *logged, f"hydra.run.dir={run_dir}",
                     env={"WANDB_MODE": "offline"})  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    pi_oracle = json.loads((runs["pi", "oracle"] / "results.json").read_text())
    pi_wrong = json.loads((runs["pi", "wrong"] / "results.json").read_text())
    assert pi_oracle["overall"]["pass@1"] == 1.0 and pi_oracle["overall"]["episodes"] == 4
    assert pi_wrong["overall"]["pass@1"] == 0.0 and pi_wrong["overall"]["reward_shaped"] > 0
    builtin = json.loads((runs["builtin", "oracle"] / "results.json").read_text())
    assert pi_oracle["overall"]["metrics"] == builtin["overall"]["metrics"]
    compared = piexp(
        "compare", str(runs["builtin", "oracle"]), str(runs["pi", "oracle"]), "--out", str(tmp_path / "cmp")
    )
    assert compared.returncode == 0, compared.stderr
    assert "| overall | 4 | pi-oracle (pi 1.6.0 (node 22.23.5)) | 1.000 |" in compared.stdout
    assert "| overall | 4 | builtin-oracle (builtin) | 1.000 |" in compared.stdout
    assert f"{runs['pi', 'oracle']} (harness pi 1.6.0 (node 22.23.5))" in compared.stdout
    assert_results_name_their_harness(tmp_path, runs)
    # A Pi eval run replays through today's Pi with no difference, and rescores with none
    # under its own reward settings.
    replayed = piexp("replay", str(runs["pi", "wrong"]), "--out", str(tmp_path / "replay"))
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-2000:]
    report = json.loads((tmp_path / "replay" / "replay.json").read_text())
    assert report["episodes"] == 4 and all(outcome["identical"] for outcome in report["outcomes"])
    rescored = piexp("rescore", str(runs["pi", "wrong"]), "--out", str(tmp_path / "rescore"), "--json")
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    report = json.loads(rescored.stdout)
    assert report["reproduced"] == report["episodes"] == 4 and not report["differ"], rescored.stdout[-2000:]


PI_LABEL = "pi 1.6.0 (node 22.23.5)"


def assert_results_name_their_harness(root: Path, runs: dict[tuple[str, str], Path]) -> None:
    """results.json and .md, the console's table, summarize, show's listing and one
    episode (Pi's system prompt once), the viewer's header and the W&B run name Pi's eval
    and the builtin one apart."""
    pi, builtin = runs["pi", "oracle"], runs["builtin", "oracle"]
    assert json.loads((pi / "results.json").read_text())["harness"] == {
        "name": "pi", "pi_version": "1.6.0", "node_version": "22.23.5"}  # fmt: skip
    assert json.loads((builtin / "results.json").read_text())["harness"] == {"name": "builtin"}
    assert (pi / "results.md").read_text().startswith(f"# Eval results: oracle, harness {PI_LABEL}\n")
    assert (builtin / "results.md").read_text().startswith("# Eval results: oracle, harness builtin\n")
    summary = piexp("summarize", str(root), "--out", str(root / "summary"))
    assert summary.returncode == 0, summary.stderr
    assert f"| pi-oracle | eval | {PI_LABEL} | complete |" in summary.stdout
    assert "| builtin-oracle | eval | builtin | complete |" in summary.stdout
    listing = piexp("show", str(pi))
    assert listing.returncode == 0 and f"4 of 4 episodes, harness {PI_LABEL}" in listing.stdout, listing.stdout
    episode = piexp("show", str(pi), "0")
    assert episode.returncode == 0, episode.stderr
    assert f"harness {PI_LABEL}" in episode.stdout
    assert (
        episode.stdout.count("system (prompt)") == 1 and "running inside pi, a coding agent harness" in episode.stdout
    )
    assert f"piexp: {pi} (harness {PI_LABEL})" in (pi / "viewer.html").read_text()
    assert f"piexp: {builtin} (harness builtin)" in (builtin / "viewer.html").read_text()
    from tests.launch.test_result_logging import _records

    wandb_run = _records(pi)["run"]
    assert wandb_run["name"] == f"{pi.name} {PI_LABEL}"
    assert wandb_run["harness_identity"]["pi_version"] == "1.6.0", wandb_run


class EvalOnlyHarness(PiHarness):
    """A user's harness that plays episodes but does not train (`trains` False)."""

    trains = False


def test_training_in_a_harness_that_does_not_train_is_refused_not_swapped_for_builtin(tmp_path):
    """mode=train in a harness whose class does not train stops with the way out named
    before anything is written, instead of training in the reference environment."""
    run_dir = tmp_path / "run"
    done = piexp("harness=pi", "harness._target_=tests.harness.test_pi_runs.EvalOnlyHarness", "service=local",
                 "model=tiny-local", "mode.max_steps=2", f"hydra.run.dir={run_dir}", timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "mode=train cannot train in harness=pi" in done.stderr and "Traceback" not in done.stderr
    assert not run_dir.exists()
