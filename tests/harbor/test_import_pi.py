"""Imported Harbor tasks played by the real Pi in piexp's sandbox (docs/harbor.md#importing-tasks).

piexp's export of two families in both languages, imported back, passes `mode=check
harness=pi`; an oracle eval scores pass@1 1.000 and a no-op (`policy=guess`) 0.000. Which
outcomes are the model's and which piexp's: a verifier that ran and wrote 0 is the
model's 0; a verifier that wrote no reward file (or `rewards.json`), a reward that is not a
number, or a verifier stopped at its timeout is an infrastructure failure, never scored.
A task whose solve.sh fails, or whose verifier gives the no-op a reward, is refused before
any run, naming it; `reproduce` refuses a run whose task folder changed, naming the task."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


from piexp.harbor.family import HarborTaskFamily
from piexp.policies import make_policy
from piexp.env.episode import get_run_renderer
from tests.harbor.atif_rules import atif_errors
from tests.harbor.test_import import make_task
from tests.harness.conftest import MODEL, episode_settings, play_all, requires_pi
from tests.tasks.test_user_families import assert_refused, read_json, run_piexp, said

pytestmark = requires_pi


def config_dir(root: Path, path: Path, **params: object) -> Path:
    conf = root / "conf" / "family"
    conf.mkdir(parents=True, exist_ok=True)
    extra = "".join(f"  {key}: {json.dumps(value)}\n" for key, value in params.items())
    (conf / "imported.yaml").write_text(
        f"imported:\n  _target_: piexp.harbor.family.HarborTaskFamily\n  path: {path}\n{extra}"
    )
    return root / "conf"


def test_an_export_imported_back_checks_and_evaluates_in_pi(tmp_path: Path) -> None:
    """About 80 s: an export, a check, two evals, a replay and a rescore of 8 tasks through Pi."""
    out = tmp_path / "export"
    result = run_piexp(tmp_path, "export-harbor", "family=arith,dates", "lang=python,javascript",
                       "tasks.train_per_family=1", "tasks.eval_per_family=1", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    conf = str(config_dir(tmp_path, out))
    common = ("--config-dir", conf, "family=imported", "lang=python", "harness=pi")
    check = tmp_path / "check"
    result = run_piexp(tmp_path, *common, "mode=check", f"hydra.run.dir={check}")
    assert result.returncode == 0, result.stderr[-3000:]
    report = read_json(check / "check.json")
    assert report["passed"] and report["oracle_pass_rate"] == 1.0
    manifest = read_json(check / "manifest.json")
    origin = manifest["family_origins"]["imported"]
    assert origin["kind"] == "harbor" and origin["refused"] == {}
    assert {key.split(" ", 1)[0] for key in origin["files"]} == {"task"}
    for policy, expected in (("oracle", 1.0), ("guess", 0.0)):
        run = tmp_path / policy
        result = run_piexp(tmp_path, *common, "mode=eval", f"policy={policy}", "mode.preflight=false",
                           f"hydra.run.dir={run}")  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        results = read_json(run / "results.json")
        assert results["overall"]["pass@1"] == expected, results["overall"]
        assert results["overall"]["episodes"] == 4  # the four eval folders, each once
    # The oracle's eval replays through today's Pi and verifiers with no difference, and
    # rescores with none (its reward is its verifier's, kept from the recording).
    result = run_piexp(tmp_path, "replay", str(tmp_path / "oracle"), "--out", str(tmp_path / "replay"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = read_json(tmp_path / "replay" / "replay.json")
    assert report["episodes"] == 4 and all(outcome["identical"] for outcome in report["outcomes"]), report
    result = run_piexp(tmp_path, "rescore", str(tmp_path / "oracle"), "--out", str(tmp_path / "rescore"), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["reproduced"] == report["episodes"] == 4 and not report["differ"], result.stdout[-2000:]
    # The oracle's episodes go out as valid ATIF, naming the Harbor task and its verifier's rewards.
    atif = tmp_path / "atif"
    result = run_piexp(tmp_path, "show", str(tmp_path / "oracle"), "--atif", str(atif))
    assert result.returncode == 0, result.stderr
    trajectories = [json.loads(path.read_text()) for path in sorted(atif.glob("*.json"))]
    assert len(trajectories) == 4
    for trajectory in trajectories:
        assert atif_errors(trajectory) == []
        extra = trajectory["extra"]["piexp"]
        assert extra["reward"] == 1.0 and extra["verifier"]["rewards"]["reward"] == 1.0
        assert "sha256:" + extra["task_digest"] == extra["verifier"]["digest"]


def _verifier_says(root: Path, name: str, script: str, timeout: float = 60.0) -> Path:
    folder = make_task(root, name, metadata='split = "eval"\n')
    (folder / "tests" / "test.sh").write_text("#!/bin/bash\nmkdir -p /logs/verifier\n" + script)
    if timeout != 60.0:
        toml = (folder / "task.toml").read_text().replace("timeout_sec = 60.0", f"timeout_sec = {timeout}")
        (folder / "task.toml").write_text(toml)
    return folder


def test_the_models_outcomes_and_piexps_failures_of_a_verifier(tmp_path: Path) -> None:
    """Six episodes at once through one Pi harness, each the no-op on a task whose verifier
    does one thing: a written 0 and a written 0.5 are the model's; the others are piexp's."""
    cases = {
        "writes-zero": ("echo 0 > /logs/verifier/reward.txt\n", None, 0.0),
        "writes-half": ('echo \'{"reward": 0.5, "tests": 2}\' > /logs/verifier/reward.json\n', None, 0.5),
        "misspelt": ("echo '{\"reward\": 1}' > /logs/verifier/rewards.json\n", "it wrote rewards.json", None),
        "not-a-number": ('echo \'{"reward": "high"}\' > /logs/verifier/reward.json\n', "non-numeric reward", None),
        "writes-nothing": ("echo checked\n", "wrote no reward file", None),
        "hangs": ("sleep 30\necho 1 > /logs/verifier/reward.txt\n", "stopped at its timeout", None),
    }
    for name, (script, _, _) in cases.items():
        _verifier_says(tmp_path / "tasks", name, script, timeout=2.0 if name == "hangs" else 60.0)
    family = HarborTaskFamily("imported")
    params = family.make_params({"path": str(tmp_path / "tasks")})
    tasks = {task.verifier.name.split("/")[1]: task for task in family.tasks("eval", 9, 0, params)}
    settings = episode_settings()
    guess = make_policy("guess", get_run_renderer(*MODEL), list(tasks.values()))
    records = play_all([lambda harness, t=tasks[name]: harness.play(guess, "guess", t, "python", settings)
                        for name in cases])  # fmt: skip
    for (name, (_, problem, reward)), record in zip(cases.items(), records):
        if problem is None:
            assert not record.infrastructure_failure and record.error is None, (name, record.error)
            assert record.reward == record.shaped == reward, name
            assert record.transcript["verifier"]["rewards"]["reward"] == reward
        else:
            assert record.infrastructure_failure, (name, record)
            assert problem in record.error and "verifier did not grade" in record.error, (name, record.error)


def test_the_oracle_works_in_the_workspace_at_the_working_folder_and_its_commands_see_the_environment(
    tmp_path: Path,
) -> None:
    """The oracle's commands run from the working folder (/work/here, not piexp's
    /sandbox), with the Dockerfile's ENV; its verifier sees what they left. The image's
    variables are the task's commands', under piexp's PATH: a NODE_OPTIONS that would stop
    any node from starting does not reach Pi, and a PATH of nowhere does not hide `wc`."""
    dockerfile = (
        "FROM debian:12\nENV GREETING=hello NODE_OPTIONS=--require=/nowhere.js PATH=/nowhere\n"
        "WORKDIR /work/here\nCOPY data/ ./\n"
    )
    folder = make_task(tmp_path / "tasks", "elsewhere", metadata='split = "eval"\n', dockerfile=dockerfile)
    (folder / "solution" / "solve.sh").write_text('#!/bin/bash\n[ "$PWD" = /work/here ] && wc -l < data.txt > count.txt'
                                                  ' && echo "$GREETING" > greeting.txt\n')  # fmt: skip
    (folder / "tests" / "test.sh").write_text(
        '#!/bin/bash\ncd /work/here && [ "$(cat count.txt)" = 3 ] && [ "$(cat greeting.txt)" = hello ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    family = HarborTaskFamily("imported")
    (task,) = family.tasks("eval", 9, 0, family.make_params({"path": str(tmp_path / "tasks")}))
    oracle = make_policy("oracle", get_run_renderer(*MODEL), [task])
    (record,) = play_all([lambda harness: harness.play(oracle, "oracle", task, "python", episode_settings())])
    assert record.error is None and record.reward == 1.0, (record.error, record.last_run)


def test_a_task_whose_oracle_fails_or_whose_noop_scores_is_refused_before_any_run(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "fine", metadata='split = "eval"\n')
    broken = make_task(tasks, "broken-solution", metadata='split = "eval"\n')
    (broken / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'cannot solve' >&2\nexit 3\n")
    generous = make_task(tasks, "generous-verifier", metadata='split = "train"\n')
    (generous / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    misspelt = make_task(tasks, "misspelt-reward", metadata='split = "train"\n')
    (misspelt / "tests" / "test.sh").write_text("#!/bin/bash\necho '{\"reward\": 1}' > /logs/verifier/rewards.json\n")
    conf = str(config_dir(tmp_path, tasks))
    run = tmp_path / "run"
    result = run_piexp(tmp_path, "--config-dir", conf, "family=imported", "lang=python", "harness=pi",
                       "mode=eval", "policy=oracle", f"hydra.run.dir={run}")  # fmt: skip
    assert_refused(
        result, run, "3 of the 4 Harbor tasks", "task demo/broken-solution", "solve.sh failed (exit 3)",
        "cannot solve", "task demo/generous-verifier", "with nothing done, its verifier gave reward 1, not 0",
        "task demo/misspelt-reward", "it wrote rewards.json; Harbor reads reward.json or reward.txt",
    )  # fmt: skip
    assert "task demo/fine" not in said(result)


def test_reproduce_refuses_a_run_whose_task_folder_changed_naming_the_task(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    make_task(tasks, "first", metadata='split = "eval"\n')
    second = make_task(tasks, "second", metadata='split = "train"\n',
                       dockerfile="FROM ubuntu:24.04\nWORKDIR /app\nCOPY data/data.txt .\n")  # fmt: skip
    conf = str(config_dir(tmp_path, tasks))
    run = tmp_path / "run"
    result = run_piexp(tmp_path, "--config-dir", conf, "family=imported", "lang=python", "harness=pi",
                       "mode=check", f"hydra.run.dir={run}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    text = (second / "tests" / "test.sh").read_text()
    (second / "tests" / "test.sh").write_text(text.replace('= "3"', '= "03"') + "# changed\n")
    again = tmp_path / "again"
    result = run_piexp(tmp_path, "reproduce", str(run), f"hydra.run.dir={again}")
    assert_refused(result, again, "Family 'imported' changed", "task demo/second")
    shutil.rmtree(run)


def test_the_oracles_episode_on_a_harbor_task_is_imitation_data(tmp_path: Path) -> None:
    """A warm start in Pi imitates the oracle: on an imported task, its episode (solve.sh
    run by Pi's shell, then done) becomes a trajectory with the verifier's reward."""
    import asyncio

    from piexp.harness.base import make_harness
    from piexp.harness.pi.env import scripted_trajectory
    from tests.harness.conftest import PI_SETTINGS

    make_task(tmp_path / "tasks", metadata='split = "train"\n')
    family = HarborTaskFamily("imported")
    (task,) = family.tasks("train", 9, 0, family.make_params({"path": str(tmp_path / "tasks")}))
    renderer = get_run_renderer(*MODEL)
    oracle = make_policy("oracle", renderer, [task])

    async def main():
        harness = make_harness(PI_SETTINGS)
        try:
            return await scripted_trajectory(harness, oracle, task, "python", episode_settings(), renderer)
        finally:
            await harness.aclose()

    trajectory, reward = asyncio.run(main())
    assert reward == 1.0 and len(trajectory.transitions) == 2
    assert trajectory.transitions[-1].reward == 1.0 and trajectory.transitions[-1].episode_done


def test_a_harbor_task_trains_in_pi_on_its_verifiers_reward(tmp_path: Path) -> None:
    """In training, an imported task's episode is a cookbook `Env` like any Pi episode:
    a labelled fixture standing in for a model does the task (or does it wrong) through
    Pi's shell, and the last transition carries the verifier's reward, 1 or 0."""
    from tinker_cookbook.renderers.base import Message

    from tests.harness.test_pi_training import _call, _rollout

    make_task(tmp_path / "tasks", metadata='split = "train"\n')
    family = HarborTaskFamily("imported")
    (task,) = family.tasks("train", 9, 0, family.make_params({"path": str(tmp_path / "tasks")}))
    for command, reward in (("wc -l < data.txt > count.txt", 1.0), ("echo 7 > /app/count.txt", 0.0)):
        turns = [Message(role="assistant", content="", tool_calls=[_call("bash", command=command)]),
                 Message(role="assistant", content="Done.")]  # fmt: skip
        group, policy = _rollout(lambda _task, turns=turns: turns, task, episode_settings())
        (trajectory,) = group.trajectories_G
        final = trajectory.transitions[-1]
        assert len(policy.emitted) == 2 and final.episode_done
        assert final.reward == reward and final.metrics["passed"] == reward, (command, final.metrics)


def test_warm_slots_keep_one_slot_a_layout_when_tasks_of_two_layouts_alternate(tmp_path: Path) -> None:
    """A warm slot's sandbox shows one working folder; a run that mixes piexp's tasks
    (/sandbox) and an imported task (/app) keeps an idle slot of each, so alternating
    episodes reuse them rather than start Pi at every switch."""
    import asyncio

    from piexp.harness.base import make_harness
    from piexp.tasks import build_tasks
    from tests.harness.conftest import PI_SETTINGS

    make_task(tmp_path / "tasks", metadata='split = "eval"\n')
    family = HarborTaskFamily("imported")
    (imported,) = family.tasks("eval", 9, 0, family.make_params({"path": str(tmp_path / "tasks")}))
    (generated,) = build_tasks("eval", 1, 0, ["arith"])
    renderer = get_run_renderer(*MODEL)
    oracle = make_policy("oracle", renderer, [generated, imported])
    settings = episode_settings()

    async def main():
        harness = make_harness(PI_SETTINGS)
        try:
            records = [await harness.play(oracle, "oracle", task, "python", settings)
                       for task in (generated, imported, generated, imported)]  # fmt: skip
            return records, [(slot.layout != (), slot.starts, slot.episodes) for slot in harness._warm.slots]
        finally:
            await harness.aclose()

    records, slots = asyncio.run(main())
    assert [record.reward for record in records] == [1.0, 1.0, 1.0, 1.0], [r.error for r in records]
    assert sorted(slots) == [(False, 1, 2), (True, 1, 2)]


def test_a_sandbox_that_cannot_start_fails_the_proof_as_piexps_failure_not_the_tasks(tmp_path: Path) -> None:
    """A bwrap that refuses its command line (here an option it does not know, added to
    every phase's binds) starts no sandbox: the proof before a run stops with piexp's own
    failure (RunIncompleteError, exit 4: run again), never a refusal of the task."""
    import asyncio

    from piexp.errors import RunIncompleteError
    from piexp.harness.pi.install import find_install, locked_versions
    from piexp.harness.pi.sandbox import PiSandbox
    from piexp.harness.pi.verifier import prove_tasks
    from piexp.sandbox.settings import SandboxSettings

    make_task(tmp_path / "tasks", metadata='split = "eval"\n')
    family = HarborTaskFamily("imported")
    (task,) = family.tasks("eval", 9, 0, family.make_params({"path": str(tmp_path / "tasks")}))

    async def main() -> None:
        sandbox = PiSandbox(find_install(locked_versions()["pi"]), SandboxSettings(max_processes=64),
                            output_cap_bytes=1 << 20, commands={"python": "python"})  # fmt: skip
        binds = sandbox.runtime_binds()
        sandbox.runtime_binds = lambda: (*binds, "--piexp-no-such-option")  # type: ignore[method-assign]
        try:
            with pytest.raises(RunIncompleteError, match="piexp's sandbox could not run the scripts of 1 Harbor task"):
                await prove_tasks(sandbox, [task], memory_mb=512, max_processes=64)
        finally:
            await sandbox.aclose()

    asyncio.run(main())
