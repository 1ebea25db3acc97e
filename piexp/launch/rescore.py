"""Rescore recorded episodes under other reward settings, without sampling or a sandbox:
each episode's reward is recomputed by its harness's `rescored_reward` (the builtin
harness: today's `WorkspaceReward` over its recorded conversation, the tool results it
got and the answer it stated; Pi: the steps graded from Pi's trace) and the task's answer,
rebuilt from the run's own config and checked against the run's task digests. Under the
run's own settings the recomputed rewards must equal the recorded ones (`reproduced`);
each setting then gets its mean reward per family x language, the share of constant
groups (one task and language, several samples: no advantage to learn from) and every
group's advantages. The rollouts were sampled under the run's settings: a model trained
under other rewards would have sampled other rollouts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piexp.config.schema import RewardSettings, RunConfig
from piexp.errors import UserError
from piexp.harness.base import Regrade, harness_class
from piexp.tasks import Task
from piexp.transcripts.capture import TRANSCRIPT_VERSION


def refuse_unreplayable_harness(config: RunConfig) -> None:
    """Replay plays recorded turns again in the harness that played them, as a model's
    tokens: a harness that cannot take them (`Harness.replays` False) is refused, naming
    the commands that take its runs."""
    if not harness_class(config.harness).replays:
        raise UserError(
            f"This run's episodes were played by harness={config.harness.name}, which does not replay recorded "
            "turns (its `replays` is False, docs/harness.md). `python -m piexp rescore RUN` regrades this run's "
            "recorded episodes, and `python -m piexp reproduce RUN` plays them again."
        )


def refuse_cut(transcript: dict[str, Any]) -> None:
    """A transcript of another format version, a stub, or one whose caps cut text (a tool
    result, the final message) cannot be rescored or replayed faithfully: refuse it,
    naming the episode."""
    version = transcript.get("version")
    if version != TRANSCRIPT_VERSION:
        raise UserError(
            f"The transcript of {episode_name(transcript)} has format version {version!r}; this piexp reads "
            f"version {TRANSCRIPT_VERSION} (piexp/transcripts/capture.py), so it cannot be rescored or replayed."
        )
    if transcript.get("omitted"):
        raise UserError(
            f"The transcript of {episode_name(transcript)} is a stub ({transcript['omitted']}): its conversation "
            "was not recorded, so it cannot be rescored or replayed."
        )
    truncated = transcript.get("truncated") or {}
    if truncated.get("fields") or truncated.get("chars_cut"):
        raise UserError(
            f"The transcript of {episode_name(transcript)} was cut by the transcript caps "
            f"({truncated.get('fields')} fields, {truncated.get('chars_cut')} chars): its tool results cannot be "
            "read back whole, so it cannot be rescored."
        )


def episode_name(transcript: dict[str, Any]) -> str:
    return (
        f"{transcript.get('policy')} on {transcript.get('task_id')} {transcript.get('language')} "
        f"sample {transcript.get('sample')}"
    )


@dataclass
class SettingScores:
    """One reward setting's rewards of every episode, in the order of the transcripts."""

    label: str
    rewards: list[float]
    cells: dict[str, dict[str, float]] = field(default_factory=dict)  # family -> language -> mean reward
    groups: list[dict[str, Any]] = field(default_factory=list)  # task, language, rewards, advantages
    # Share of groups (>= 2 samples) whose rewards are all equal; None when there are no
    # such groups (one sample a task, as an eval at k=1): undefined, shown "n/a".
    constant_groups: float | None = None

    @property
    def constant_groups_text(self) -> str:
        return (
            "n/a (no groups of two or more samples)" if self.constant_groups is None else f"{self.constant_groups:.0%}"
        )


def group_key(transcript: dict[str, Any]) -> tuple[str, str]:
    """The group an episode was sampled in: its task and language (an eval's k samples),
    and in a training run its iteration and group too."""
    task = str(transcript.get("task_id"))
    if "iteration" in transcript:
        task = f"{task} @ iteration {transcript['iteration']} group {transcript.get('group')}"
    return (task, str(transcript.get("language")))


def score_setting(label: str, transcripts: Sequence[dict[str, Any]], rewards: list[float]) -> SettingScores:
    scores = SettingScores(label=label, rewards=rewards)
    by_cell: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_group: dict[tuple[str, str], list[float]] = defaultdict(list)
    for transcript, value in zip(transcripts, rewards, strict=True):
        by_cell[(str(transcript.get("family")), str(transcript.get("language")))].append(value)
        by_group[group_key(transcript)].append(value)
    for (family, language), values in sorted(by_cell.items()):
        scores.cells.setdefault(family, {})[language] = sum(values) / len(values)
    groups = [(key, values) for key, values in sorted(by_group.items()) if len(values) >= 2]
    for (task_id, language), values in groups:
        mean = sum(values) / len(values)
        scores.groups.append(
            {
                "task_id": task_id,
                "language": language,
                "rewards": values,
                "advantages": [round(value - mean, 6) for value in values],
            }
        )
    if groups:
        scores.constant_groups = sum(len(set(values)) == 1 for _key, values in groups) / len(groups)
    return scores


def task_answers(
    config: RunConfig, transcripts: Iterable[dict[str, Any]], recorded: dict[str, list[str]]
) -> dict[str, Task]:
    """The run's tasks by id, rebuilt from its config, each checked against the digest the
    run recorded (the manifest's `task_digests`: a list per split, in the split's order; a
    generator changed since: refused, naming the task)."""
    from piexp.env.splits import build_splits

    splits = build_splits(config)
    # With adaptive difficulty a training recording also holds train tasks at other levels.
    rebuilt = {
        "train": splits.train,
        "eval": splits.eval,
        **{
            f"train_level/{family}/{level}": level_tasks
            for family, by_level in splits.train_levels.items()
            for level, level_tasks in by_level.items()
        },
    }
    tasks = {task.task_id: task for split in rebuilt.values() for task in split}
    digests = {
        task.task_id: digest
        for key, split in rebuilt.items()
        for task, digest in zip(split, recorded.get(key) or [], strict=False)
    }
    for transcript in transcripts:
        task_id = str(transcript.get("task_id"))
        task = tasks.get(task_id)
        if task is None:
            raise UserError(f"Task {task_id} of the recording is not among the tasks the run's config builds today.")
        digest = digests.get(task_id)
        if digest is not None and digest != task.task_digest:
            raise UserError(
                f"Task {task_id} changed since the run was recorded (digest {digest[:12]} then, "
                f"{task.task_digest[:12]} now): its answer may differ, so the recording cannot be rescored."
            )
    return tasks


def reproduction_check(
    transcripts: Sequence[dict[str, Any]], tasks: dict[str, Task], reward: RewardSettings, regrade: Regrade
) -> tuple[int, list[str]]:
    """How many episodes today's reward grades exactly as recorded under the run's own
    settings (binary `reward` and shaped `shaped`), and a line per one it does not;
    `regrade`: the run's harness's `rescored_reward`."""
    same, differ = 0, []
    for transcript in transcripts:
        answer = tasks[str(transcript["task_id"])].answer
        binary = regrade(transcript, answer, reward, binary=True)
        shaped = regrade(transcript, answer, reward, binary=False)
        if abs(binary - float(transcript["reward"])) < 1e-9 and abs(shaped - float(transcript["shaped"])) < 1e-9:
            same += 1
        else:
            differ.append(
                f"{episode_name(transcript)}: recorded binary {transcript['reward']:g} shaped "
                f"{transcript['shaped']:g}, today {binary:g} and {shaped:g}"
            )
    return same, differ


def rescore_markdown(run: Path, scores: Sequence[SettingScores], reproduced: int, differ: list[str], total: int) -> str:
    lines = [f"# Rescore of {run}", ""]
    lines += [
        "**These rollouts were sampled under the run's own reward settings.** Rescoring shows what the same "
        "episodes earn under other settings; a model trained under them would have sampled other episodes.",
        "",
        f"Under the run's own settings today's reward reproduces {reproduced} of {total} recorded rewards.",
    ]
    if differ:
        lines += ["", "Episodes graded differently today (the reward code or its inputs changed):", ""]
        lines += [f"- {line}" for line in differ[:20]]
    lines += ["", "## Mean reward per family x language", ""]
    cells = sorted({(family, language) for s in scores for family, row in s.cells.items() for language in row})
    lines.append("| setting | " + " | ".join(f"{f} x {lang}" for f, lang in cells) + " | constant groups |")
    lines.append("|---" * (len(cells) + 2) + "|")
    for setting in scores:
        values = [f"{setting.cells.get(f, {}).get(lang, float('nan')):.3f}" for f, lang in cells]
        lines.append(f"| `{setting.label}` | " + " | ".join(values) + f" | {setting.constant_groups_text} |")
    lines += [
        "",
        "A constant group (one task and language, several samples, all rewards equal) has zero advantages: "
        "RL learns nothing from it. Each group's advantages are in rescore.json.",
        "",
    ]
    return "\n".join(lines)


def plot_settings(scores: Sequence[SettingScores], path: Path) -> None:
    """Mean reward per family x language, one bar per setting, and the constant-group share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(family, language) for s in scores for family, row in s.cells.items() for language in row})
    width = 0.8 / max(1, len(scores))
    figure, axes = plt.subplots(figsize=(2.0 + 1.1 * len(cells), 4.0))
    for index, setting in enumerate(scores):
        values = [setting.cells.get(f, {}).get(lang, 0.0) for f, lang in cells]
        axes.bar(
            [i + index * width for i in range(len(cells))],
            values,
            width=width,
            label=f"{setting.label} (constant groups {setting.constant_groups_text})",
        )
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(cells))], labels=[f"{f}\n{lang}" for f, lang in cells])
    axes.set_ylabel("mean reward")
    axes.set_title("rescored rewards (rollouts sampled under the run's settings)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
