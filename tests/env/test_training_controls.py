"""The online controls during training. Each training step's row of
metrics.jsonl (written by the cookbook's own logger) records the informative-group
fraction, the groups the binary gate dropped, the pool sizes and each adapted family's
level; difficulty pools move groups as their pass rates change and a resumed run rebuilds
the same pools and batches; adaptive difficulty drives a family's level into the band and
back when the policy changes, with tasks from the same seeded streams; bad settings are
one paragraph, exit 2, nothing written.

The groups are the run's real workspace groups (real tasks, built by the run's dataset
code); what stands in for the model is `_fixture_trajectories`, a labelled TEST FIXTURE
that says which episodes of a group pass, from the group's task and a skill."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import tinker

import piexp
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.types import EnvGroupBuilder, Trajectory, Transition
from tinker_cookbook.utils import ml_log

from piexp.commands.summarize import summarize
from piexp.config.compose import load
from piexp.config.schema import RunConfig
from piexp.cookbook_compat import extra_step_metrics
from piexp.env.dataset import episode_settings, train_sampling
from piexp.env.group_outcomes import OUTCOMES_FILE, OutcomeLog, workspace_group
from piexp.env.splits import build_splits, level_train_tasks
from piexp.env.task_sampler import OutcomeDrivenDataset, TrainingControls
from piexp.env.training_pipeline import training_chain
from piexp.errors import UserError
from piexp.launch.warm_start import write_summary
from piexp.tasks import Task
from piexp.transcripts.runs import load_run
from piexp.transcripts.viewer import render_viewer
from tests.job_launcher import run_piexp

SANDBOX = "http://127.0.0.1:1/run_code"  # never called: the fixture grades without running programs


def _fixture_trajectories(passes: int, size: int) -> list[Trajectory]:
    """TEST FIXTURE standing in for a model's episodes: `passes` of `size` episodes pass
    (functional_correct 1), the rest fail with varied shaped rewards, as a model's would."""
    ob = tinker.ModelInput.from_ints([1, 2, 3])
    action = TokensWithLogprobs(tokens=[4, 5], maybe_logprobs=[0.0, 0.0])
    return [
        Trajectory(
            transitions=[
                Transition(
                    ob=ob,
                    ac=action,
                    reward=1.0 if i < passes else 0.1 * (i + 1),
                    episode_done=True,
                    metrics={"functional_correct": float(i < passes)},
                )
            ],
            final_ob=ob,
        )
        for i in range(size)
    ]


class _Run:
    """The run's train dataset as the dataset builder makes it (sampler, the training
    chain), over a log in `folder`; `step` grades a batch with the fixture."""

    def __init__(self, config: RunConfig, folder: Path | None) -> None:
        self.config = config
        splits = build_splits(config)
        self.log = OutcomeLog(folder / OUTCOMES_FILE if folder is not None else None)
        sampler, found = train_sampling(config, splits, episode_settings(config, SANDBOX), self.log)
        assert isinstance(found, OutcomeDrivenDataset)
        self.sampler: OutcomeDrivenDataset = found
        self.dataset = training_chain(config, sampler, SANDBOX, self.log, run_dir=folder, record_outcomes=True)
        self.controls = TrainingControls(self.log, sampler=found)

    def step(self, index: int, passes: Callable[[Task], int]) -> list[str]:
        """Batch `index`, each group graded with `passes(task)` passing episodes; the task ids."""
        batch = self.dataset.get_batch(index)
        size = self.config.mode.group_size  # type: ignore[union-attr]

        async def grade(builder: EnvGroupBuilder) -> None:
            await builder.compute_group_rewards(_fixture_trajectories(passes(workspace_group(builder).task), size), [])

        async def grade_all(builders: Sequence[EnvGroupBuilder]) -> None:
            await asyncio.gather(*(grade(builder) for builder in builders))

        asyncio.run(grade_all(batch))
        return [workspace_group(builder).task.task_id for builder in batch]


POOLS = ["mode=train", "family=[arith,dates]", "tasks.train_per_family=4", "mode.group_size=4"]
POOLS += ["mode.groups_per_batch=3", "mode.max_steps=8", "tasks.pools.enabled=true"]


def _solves_arith(task: Task) -> int:
    """TEST FIXTURE policy: every arith episode passes, dates tasks 0-1 half, the rest none."""
    if task.family == "arith":
        return 4
    return 2 if task.task_id.endswith(("00000", "00001")) else 0


def test_pools_move_groups_as_their_pass_rates_change_and_a_resume_rebuilds_them(tmp_path: Path) -> None:
    config = load(POOLS)
    run = _Run(config, tmp_path)
    batches = [run.step(0, _solves_arith)]
    assert run.sampler.snapshots[0] == {
        "controls/pool/easy": 0.0,
        "controls/pool/normal": 8.0,
        "controls/pool/hard": 0.0,
    }
    for index in range(1, 8):
        batches.append(run.step(index, _solves_arith))
    graded = {task_id for batch in batches for task_id in batch}
    easy = sum(task_id.startswith("train-arith") for task_id in graded)
    hard = sum(task_id.startswith("train-dates") and not task_id.endswith(("00000", "00001")) for task_id in graded)
    last = run.sampler.snapshots[7]
    assert (last["controls/pool/easy"], last["controls/pool/hard"]) == (easy, hard) and easy and hard
    assert last["controls/pool/normal"] == 8 - easy - hard  # the half-solved and ungraded stay normal
    # Pools sampled by weight (0.2 / 1.0 / 0.2): once sorted, most slots go to the normal pool.
    later = [task_id for batch in batches[4:] for task_id in batch]
    normal = [t for t in later if t.startswith("train-dates") and t.endswith(("00000", "00001"))]
    assert len(normal) > len(later) / 3
    metrics = run.controls.step_metrics(7)
    assert metrics["controls/groups"] == 3.0 and 0 <= metrics["controls/informative_fraction"] <= 1

    # The run stopped during step 5 (its checkpoint is at 5: steps 5.. are redone): the
    # log holds step 5's outcomes partly; a fresh process asked for batch 5 first rebuilds
    # the pools from the outcomes before it and gives the same batches from there on.
    lines = (tmp_path / OUTCOMES_FILE).read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["step"] < 5]
    (tmp_path / OUTCOMES_FILE).write_text("\n".join(kept + [lines[-1].replace('"step": 7', '"step": 5')]) + "\n")
    resumed = _Run(config, tmp_path)
    assert [resumed.step(index, _solves_arith) for index in range(5, 8)] == batches[5:]
    assert resumed.sampler.snapshots == {index: run.sampler.snapshots[index] for index in range(5, 8)}
    assert [json.loads(line) for line in (tmp_path / OUTCOMES_FILE).read_text().splitlines()] == [
        json.loads(line) for line in lines
    ]


def test_a_group_moves_pool_when_the_policy_changes() -> None:
    config = load([*POOLS, "family=[arith]", "tasks.train_per_family=2", "mode.groups_per_batch=2"])
    run = _Run(config, None)
    run.step(0, lambda task: 4)  # both solved: easy
    run.step(1, lambda task: 0)  # both failed now: hard
    run.step(2, lambda task: 1)
    assert run.sampler.snapshots[1]["controls/pool/easy"] == 2.0
    assert run.sampler.snapshots[2]["controls/pool/hard"] == 2.0
    assert run.sampler.snapshots[2]["controls/pool/easy"] == 0.0
    assert run.dataset.get_batch(3) and run.sampler.snapshots[3]["controls/pool/normal"] == 2.0


ADAPTIVE = ["mode=train", "family=[arith]", "tasks.train_per_family=4", "mode.group_size=4"]
ADAPTIVE += ["mode.groups_per_batch=2", "mode.max_steps=60", "tasks.adaptive.enabled=true"]
ADAPTIVE += ["tasks.adaptive.window=4", "tasks.adaptive.min_groups_between_moves=4"]


def _level(task: Task) -> int:
    return int(task.task_id.rsplit("-level", 1)[1])


def _skilled(skill: int) -> Callable[[Task], int]:
    """TEST FIXTURE policy whose success depends on difficulty: below its skill level every
    episode of a group passes, at it half, above it none."""
    return lambda task: 4 if _level(task) < skill else 2 if _level(task) == skill else 0


def test_adaptive_difficulty_drives_the_level_into_the_band_and_back_when_the_policy_changes() -> None:
    run = _Run(load(ADAPTIVE), None)
    levels = []
    for index, skill in enumerate([3] * 20 + [5] * 20 + [1] * 20):
        batch = run.step(index, _skilled(skill))
        levels.append(int(run.sampler.snapshots[index]["controls/level/arith"]))
        assert {task_id.rsplit("-level", 1)[1] for task_id in batch} == {str(levels[-1])}
    assert levels[0] == 1 and levels[19] == 3 and levels[10:20] == [3] * 10  # rose into the band, stays
    assert levels[39] == 5 and levels[30:40] == [5] * 10  # the policy improved: the level followed
    assert levels[59] == 1 and levels[50:60] == [1] * 10  # and back down when it got worse
    # A level moves one step at a time, never sooner than min_groups_between_moves (4 groups: 2 steps).
    moves = [i for i in range(1, 60) if levels[i] != levels[i - 1]]
    assert all(abs(levels[i] - levels[i - 1]) == 1 for i in moves)
    assert all(later - earlier >= 2 for earlier, later in zip(moves, moves[1:]))


def test_a_resumed_adaptive_run_rebuilds_each_familys_level_and_gives_the_same_batches(tmp_path: Path) -> None:
    """The run stops during step 12 (its checkpoint is at 12): a fresh process asked for
    batch 12 first replays the outcomes before it from group_outcomes.jsonl, so its level,
    rolling window and move spacing are the uninterrupted run's, and so are its batches."""
    config = load([*ADAPTIVE, "mode.max_steps=20"])
    run = _Run(config, tmp_path)
    skills = [4] * 10 + [2] * 10  # the level rises, then falls back: both directions cross the resume
    batches = [run.step(index, _skilled(skill)) for index, skill in enumerate(skills)]
    levels = [run.sampler.snapshots[index]["controls/level/arith"] for index in range(20)]
    assert len(set(levels[:12])) > 1 and len(set(levels[12:])) > 1, f"no move on either side of the resume: {levels}"

    lines = (tmp_path / OUTCOMES_FILE).read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["step"] < 12]
    partial = [line for line in lines if json.loads(line)["step"] == 12][:1]  # step 12 half graded when killed
    (tmp_path / OUTCOMES_FILE).write_text("\n".join(kept + partial) + "\n")
    resumed = _Run(config, tmp_path)
    assert [resumed.step(index, _skilled(skills[index])) for index in range(12, 20)] == batches[12:]
    assert resumed.sampler.snapshots == {index: run.sampler.snapshots[index] for index in range(12, 20)}
    assert [json.loads(line) for line in (tmp_path / OUTCOMES_FILE).read_text().splitlines()] == [
        json.loads(line) for line in lines
    ]


def test_tasks_at_a_level_come_from_the_same_streams_and_never_overlap_the_eval_split() -> None:
    config = load([*ADAPTIVE, "tasks.adaptive.max_level=3"])
    splits = build_splits(config)
    assert sorted(splits.train_levels["arith"]) == [1, 2, 3]
    by_level = splits.train_levels["arith"]
    streams = {level: [task.params["stream"] for task in tasks] for level, tasks in by_level.items()}
    assert streams[1] == streams[2] == streams[3] == [task.params["stream"] for task in splits.train]
    assert by_level[2][0].task_id == "train-arith-0-00000-level2" and by_level[1][0] != by_level[2][0]
    assert build_splits(config).digests() == splits.digests()  # reproducible, and in the manifest's digests
    assert "train_level/arith/3" in splits.digests()
    # A level task also found in the eval split is refused, as for the train split.
    with pytest.raises(UserError, match="overlap"):
        level_train_tasks(config, [by_level[2][1]])


def test_each_training_steps_metrics_row_records_the_controls(tmp_path: Path) -> None:
    """Through the cookbook's own logger (set up as rl.train.main does): a training step's
    row gains the controls' metrics; an evaluation's row does not."""
    config = load([*ADAPTIVE, "algo.binary_gate=true"])
    run = _Run(config, tmp_path)
    run.step(0, lambda task: 2)
    run.step(1, lambda task: 0)
    cookbooks_own = ml_log.setup_logging
    with extra_step_metrics(run.controls.step_metrics):
        logger = ml_log.setup_logging(log_dir=str(tmp_path), config=None, do_configure_logging_module=False)
    for step in (0, 1):
        logger.log_metrics({"progress/batch": step, "env/all/reward/total": 0.5}, step=step)
    logger.log_metrics({"test/env/all/reward/total": 0.25}, step=2)
    logger.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["controls/informative_fraction"] == 1.0 and rows[0]["controls/gate_dropped"] == 0.0
    assert rows[1]["controls/informative_fraction"] == 0.0 and rows[1]["controls/gate_dropped"] == 2.0
    assert rows[1]["controls/groups"] == 2.0 and rows[1]["controls/level/arith"] == 1.0
    assert not any(key.startswith("controls/") for key in rows[2])
    assert ml_log.setup_logging is cookbooks_own  # the hook is undone on leaving

    # `summarize` and the run's viewer show them where they show the training metrics.
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("mode:\n  name: train\n")
    written = summarize(tmp_path)
    summary = written["md"].read_text()
    assert "## Online controls per training step" in summary
    assert (
        "| step | groups | informative_fraction | pass_rate | gate_dropped | level/arith | level_pass_rate/arith |"
        in (summary)
    )
    assert "| 1 | 2 | 0 | 0 | 2 | 1 | 0.5 |" in summary  # step 1's level was chosen after step 0's 0.5
    own = write_summary(tmp_path)  # and the run's own summary.md, per iteration
    assert "## Online controls per iteration" in own and "| 1 | 2 | 0 | 0 | 2 | 1 | 0.5 |" in own
    assert written["controls"].read_bytes()[:4] == b"\x89PNG"
    page = render_viewer(load_run(tmp_path))
    assert '"controls/informative_fraction":1.0' in page and "online controls per step" in page


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["tasks.adaptive.band=[0.8,0.2]"], "low < high"),
        (["tasks.adaptive.band=[0.2,1.5]"], "less than or equal to 1"),
        (["tasks.adaptive.start_level=6"], "levels 1..5"),
        (["tasks.adaptive.max_level=9"], "levels 1..5"),
        (["tasks.adaptive.min_level=3", "tasks.adaptive.max_level=2"], "exceeds"),
        (["tasks.adaptive.families=[dates]"], "not among the selected families"),
        (["tasks.pools.enabled=true"], "cannot be combined"),
        (["algo.async_config.max_steps_off_policy=1"], "synchronous"),
    ],
)
def test_bad_adaptive_settings_are_one_clear_error(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message) as caught:
        load([*ADAPTIVE, *overrides])
    assert caught.value.exit_code == 2


def test_bad_pool_settings_are_one_clear_error() -> None:
    with pytest.raises(UserError, match="must be below"):
        load([*POOLS, "tasks.pools.hard_at=0.9", "tasks.pools.easy_at=0.5"])
    with pytest.raises(UserError, match="all 0"):
        load([*POOLS, "tasks.pools.weights={easy: 0, normal: 0, hard: 0}"])
    with pytest.raises(UserError, match="training option"):
        load(["mode=eval", "policy=oracle", "tasks.pools.enabled=true"])


def test_adapting_a_family_without_declared_difficulty_exits_2_writing_nothing(tmp_path: Path) -> None:
    lines = [
        json.dumps({"id": f"t{i}", "instruction": "Print the sum of numbers.txt.", "answer": i * 5 + 10,
                    "files": {"numbers.txt": "".join(f"{n}\n" for n in range(i, i + 5))},
                    "references": {"python": 'print(sum(int(l) for l in open("numbers.txt") if l.strip()))\n'}})
        for i in range(6)
    ]  # fmt: skip
    (tmp_path / "sums.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "conf" / "family").mkdir(parents=True)
    (tmp_path / "conf" / "family" / "sums.yaml").write_text(
        "# @package family\nsums:\n  _target_: piexp.tasks.task_file.TaskFileFamily\n"
        f"  path: {tmp_path / 'sums.jsonl'}\n  eval_percent: 30\n"
    )
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    env["PYTHONPATH"] = str(Path(piexp.__file__).resolve().parents[1])  # this checkout's piexp, from any folder
    result = run_piexp(
        "--config-dir",
        str(tmp_path / "conf"),
        "family=[arith,sums]",
        "mode=train",
        "tasks.adaptive.enabled=true",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "cannot adapt family sums: it declares no difficulty levels" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr and not run_dir.exists()


def test_each_control_is_off_by_default_and_a_preset_away() -> None:
    default = load(["mode=train"]).tasks
    assert not default.pools.enabled and not default.adaptive.enabled
    pools = load(["experiment=difficulty_pools"]).tasks.pools
    assert pools.enabled and (pools.weights.easy, pools.weights.normal, pools.weights.hard) == (0.2, 1.0, 0.2)
    adaptive = load(["experiment=adaptive_difficulty", "family=[arith,dates]"]).tasks.adaptive
    assert adaptive.enabled and adaptive.band == (0.2, 0.8)
